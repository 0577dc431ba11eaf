"""Crash recovery: no execution is stranded, and one whose worker died moves on within
seconds of a live worker being available.

- A worker killed after its lease was renewed is taken over when the renewed lease
  expires (the renewal moves the takeover timer).
- Wakes prefetched by a worker that is then killed are delivered again by the relay
  (a wake counts as done when a run of its execution starts, not when the broker took it).
- A paused worker (SIGSTOP) that comes back after another took over records nothing.
- Over repeated kills, each killed step runs again once, on a live worker, long before a
  broker would redeliver its message (a minute at most: a recovery that waited for the
  broker, or never came, fails). The recovery times are a figure, printed and written to
  ``$YIELDSTAR_RECOVERY_OUT`` when set (those of docs/operations/reliability.md), not an
  assertion: a loaded machine stretches them.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import time
from datetime import timedelta
from functools import partial
from pathlib import Path

import pytest

from tests.faults.figures import percentile
from yieldstar_django.models import Execution, ExecutionStep, WakeIntent
from yieldstar_django.runtime import get_execution, start_workflow

from .conftest import E2E_MARKS, Env, Process, attempts, kill_mid_step_and_rescue, wait_until

pytestmark = [*E2E_MARKS, pytest.mark.django_db(transaction=True)]

#: Kills per broker in ``test_recovery_time_after_worker_kills``.
KILLS = int(os.environ.get("YIELDSTAR_RECOVERY_KILLS", "20"))


def holder(workers: list[Process], pid: int) -> Process:
    for worker in workers:
        if pid in worker.pids():
            return worker
    raise AssertionError(f"no worker runs pid {pid}")


def test_a_worker_killed_after_renewing_its_lease_is_taken_over(e2e: Env, tmp_path: Path) -> None:
    """Regression: a renewal used to leave the takeover timer at the first expiry, which
    fired while the lease still looked valid; the execution then stayed ``running``."""
    e2e.start_relay()
    doomed = e2e.start_worker("doomed", concurrency=1)
    eid = start_workflow("e2e.slow_step", str(tmp_path))
    wait_until("the step to start", lambda: len(attempts(tmp_path)) == 1)
    first_expiry = Execution.objects.get(pk=eid).lease_expires_at
    assert first_expiry is not None
    wait_until(
        "the lease to be renewed twice",
        lambda: (
            (Execution.objects.get(pk=eid).lease_expires_at or first_expiry)
            > first_expiry + timedelta(seconds=1.5)
        ),
        30,
    )
    kill_mid_step_and_rescue(e2e, doomed, eid, tmp_path, timeout=60)
    e2e.stop_all()


def test_wakes_prefetched_by_a_killed_worker_are_delivered_again(e2e: Env, tmp_path: Path) -> None:
    """Regression: a wake was done once the broker took it, so the messages a killed
    worker had prefetched (Redis keeps them ``unacked`` for an hour) stranded their
    executions in ``pending``."""
    e2e.start_relay()
    doomed = e2e.start_worker("doomed", concurrency=1)
    blocker = start_workflow("e2e.slow_step", str(tmp_path))
    wait_until("the blocking step to start", lambda: len(attempts(tmp_path)) == 1)
    quick = [start_workflow("e2e.quick") for _ in range(3)]
    # Give the busy worker time to prefetch the three messages it cannot run.
    time.sleep(2.0)
    assert all(get_execution(eid).status == "pending" for eid in quick)
    doomed.kill()
    e2e.start_worker("rescuer")
    for eid in [blocker, *quick]:
        wait_until(f"{eid} to complete", lambda eid=eid: get_execution(eid).is_finished, 60)
        assert get_execution(eid).status == "completed", get_execution(eid).error
    e2e.stop_all()
    wait_until(
        "every intent to be acknowledged",
        lambda: (
            not WakeIntent.objects.filter(
                execution_id__in=[blocker, *quick], delivered_at__isnull=True, reason="start"
            ).exists()
        ),
        15,
    )


def test_a_paused_worker_records_nothing_after_its_successor_took_over(
    e2e: Env, tmp_path: Path
) -> None:
    e2e.start_relay()
    paused = e2e.start_worker("paused", concurrency=1)
    eid = start_workflow("e2e.paused_step", str(tmp_path))
    wait_until("the step to start", lambda: len(attempts(tmp_path)) == 1)
    paused_pid = int(attempts(tmp_path)[0])
    paused.signal(signal.SIGSTOP)
    try:
        e2e.start_worker("successor")
        wait_until("the successor to finish", lambda: get_execution(eid).is_finished, 60)
        execution = get_execution(eid)
        assert execution.status == "completed", execution.error
        assert execution.result.startswith("attempt 2 in ")
        (tmp_path / "release").write_text("")
    finally:
        paused.signal(signal.SIGCONT)
    # The paused run's step returns now; its write must be refused by the lease fence.
    wait_until(
        "the paused run to notice it lost its lease",
        lambda: "'lost'" in paused.output(),
        30,
    )
    step = ExecutionStep.objects.get(execution_id=eid, step_key="0")
    assert json.loads(step.value_json).startswith("attempt 2 in ")
    assert get_execution(eid).result.startswith("attempt 2 in ")
    assert paused_pid not in {int(p) for p in attempts(tmp_path)[1:]}
    e2e.stop_all()


def _finished(execution_id: str) -> bool:
    return bool(get_execution(execution_id).is_finished)


def _count(directory: Path, n: int) -> bool:
    return len(attempts(directory)) == n


def test_recovery_time_after_worker_kills(e2e: Env, tmp_path: Path) -> None:
    """Kill the worker running a step, with another worker alive, ``KILLS`` times; each
    time the step starts again, once, in a live worker, within a minute (the lease, 4 s,
    bounds it on an idle machine), and the execution completes."""
    e2e.start_relay()
    workers = [e2e.start_worker(f"w{n}", concurrency=1) for n in range(2)]
    recoveries: list[float] = []
    for round_ in range(KILLS):
        directory = tmp_path / f"round{round_}"
        directory.mkdir()
        eid = start_workflow("e2e.slow_step", str(directory))
        wait_until("the step to start", partial(_count, directory, 1), 60)
        victim = holder(workers, int(attempts(directory)[0]))
        # The other worker must be consuming: the measure is "a live worker is there".
        survivors = [w for w in workers if w is not victim]
        for worker in survivors:
            worker.wait_ready()
        killed_at = time.monotonic()
        victim.kill()
        wait_until("the step to run again", partial(_count, directory, 2), 60)
        recoveries.append(time.monotonic() - killed_at)
        wait_until("the execution to complete", partial(_finished, eid), 60)
        first, again = attempts(directory)
        assert again != first and any(int(again) in w.pids() for w in survivors), again
        workers = [*survivors, e2e.start_worker(f"w{round_ + 2}", concurrency=1, wait=False)]
    recoveries.sort()
    p50 = statistics.median(recoveries)
    p95 = percentile(recoveries, 0.95)
    report = {
        "broker": e2e.broker.kind,
        "kills": len(recoveries),
        "p50": round(p50, 2),
        "p95": round(p95, 2),
        "max": round(recoveries[-1], 2),
    }
    print(f"\nrecovery after a worker kill: {report}")
    out = os.environ.get("YIELDSTAR_RECOVERY_OUT")
    if out:
        with open(out, "a") as handle:
            handle.write(json.dumps(report) + "\n")
    e2e.stop_all()
