"""Queues under processes racing on one database (PostgreSQL and SQLite): four
processes start into a queue and resume its executions at once; the probe each execution
runs (a ``begin`` and an ``end`` line in a shared log, in real order) shows at no moment
more than ``concurrency`` of them running, nor more than ``per_key`` of one key; every
start ran exactly once and the queue's counters come back to zero. A rated queue's
starts, by their admission times, never exceed its limit in any window."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

from tests.shared import race_workflows
from tests.shared.fixtures import Spawn
from tests.shared.outside import runtime_on
from yieldstar_django.models import Execution, QueueState

pytestmark = pytest.mark.slow

PROCESSES = 4


def replay(path: Path) -> tuple[int, int, Counter[str]]:
    """The most executions running at once, of one key at once, and begins per id."""
    running: set[str] = set()
    by_key: Counter[str] = Counter()
    most = most_of_key = 0
    begins: Counter[str] = Counter()
    for line in race_workflows.read_log(str(path)):
        event, execution_id, key = line.split(":")
        if event == "begin":
            begins[execution_id] += 1
            running.add(execution_id)
            by_key[key] += 1
            most = max(most, len(running))
            most_of_key = max(most_of_key, by_key[key])
        else:
            running.discard(execution_id)
            by_key[key] -= 1
    return most, most_of_key, begins


def test_racing_processes_never_run_more_than_the_queue_allows(
    alias: str, spawn: Spawn, tmp_path: Path
) -> None:
    queue = race_workflows.RACE_QUEUE
    name = queue.name
    starts = 30
    total = starts * PROCESSES
    path = tmp_path / "probe"
    with runtime_on(alias):
        Execution.objects.filter(queue=name).delete()
        QueueState.objects.filter(pk=name).delete()
    spawn(
        "queue_racer",
        [(alias, name, starts, 4, total, str(path))] * PROCESSES,
        yieldstar={"WAKE_BACKEND": "tests.shared.workers.discard_wakes"},
    )
    most, most_of_key, begins = replay(path)
    assert queue.concurrency is not None and queue.per_key is not None
    assert most <= queue.concurrency, most
    assert most_of_key <= queue.per_key, most_of_key
    # The bound was reached: the racers did contend (SQLite's runs overlap less).
    assert most == queue.concurrency if alias == "postgres" else most >= 2, most
    with runtime_on(alias):
        statuses = Counter(Execution.objects.filter(queue=name).values_list("status", flat=True))
        assert statuses == {"completed": total}, statuses
        assert set(begins) == set(Execution.objects.filter(queue=name).values_list("id", flat=True))
        assert set(begins.values()) == {1}
        assert QueueState.objects.values_list("running", "waiting").get(pk=name) == (0, 0)


def test_racing_processes_never_start_more_than_the_rate_in_any_window(
    alias: str, spawn: Spawn, tmp_path: Path
) -> None:
    queue = race_workflows.RATED_QUEUE
    assert queue.rate is not None
    limit, seconds = queue.rate
    name = queue.name
    starts = 4
    total = starts * PROCESSES
    with runtime_on(alias):
        Execution.objects.filter(queue=name).delete()
        QueueState.objects.filter(pk=name).delete()
    spawn(
        "queue_racer",
        [(alias, name, starts, 2, total, str(tmp_path / "probe"))] * PROCESSES,
        yieldstar={"WAKE_BACKEND": "tests.shared.workers.discard_wakes"},
    )
    with runtime_on(alias):
        times = sorted(Execution.objects.filter(queue=name).values_list("admitted_at", flat=True))
    assert len(times) == total and None not in times
    window = timedelta(seconds=seconds)
    for index, at in enumerate(times):
        in_window = sum(1 for other in times[index:] if other < at + window)
        assert in_window <= limit, (index, in_window)
