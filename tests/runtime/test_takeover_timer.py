"""A lease's takeover timer while the lease is held: neither pruning acknowledged wake
intents (``yieldstar_prune --intents-age 0``) at the worst moment nor the holder's death
before its next renewal may leave the execution without the timer that resumes it. On
PostgreSQL (one statement per lease operation) and SQLite (short transactions).

The worst moment: the holder's renewal came late, so its takeover timer fell due while
nobody had taken the lease over yet; a wake that arrived during the run made the holder
run the workflow again under the same lease, and a run that starts acknowledges the
execution's due intents. The tests drive the holder's renewals, the prune and the death
itself (no lease keeper thread, no release: a killed worker does neither).
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests.polling import wait_until
from tests.shared import outside
from tests.shared.fixtures import WakeCollector, configure
from yieldstar_django.core.definition import define_store, unregister_store
from yieldstar_django.core.results import Wake
from yieldstar_django.models import Execution, WakeIntent
from yieldstar_django.runtime import executions
from yieldstar_django.runtime.executions import ResumeResult
from yieldstar_django.runtime.leases import (
    TAKEOVER_MARGIN,
    Lease,
    acquire_lease,
    mark_wake_pending,
)
from yieldstar_django.runtime.registry import unregister_workflow, workflow
from yieldstar_django.runtime.steps import Step
from yieldstar_django.wakes import relay_once, write_intents

LEASE = 0.3


class WorkerDied(SystemExit):
    """The worker process is gone (SIGKILL): it releases nothing and never renews again.
    A stop the engine leaves unrecorded (``runtime.outcomes.NOT_RECORDED``), as a SIGKILL
    records nothing: any other ``BaseException`` of the workflow's is its failure."""


@pytest.fixture
def routed(alias: str) -> Iterator[str]:
    """``alias``, with the runtime's tables on it."""
    with outside.runtime_on(alias):
        yield alias


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> list[Lease]:
    """The leases ``run_execution`` takes, in order; the test renews them itself (no lease
    keeper thread), and a run that dies lets go of nothing (``_abandon`` is what a worker
    that is still alive does after an error)."""
    leases: list[Lease] = []
    acquire = executions.acquire_lease

    def acquire_and_keep(execution_id: str) -> Lease | None:
        lease = acquire(execution_id)
        if lease is not None:
            leases.append(lease)
        return lease

    monkeypatch.setattr(executions, "acquire_lease", acquire_and_keep)
    monkeypatch.setattr(Lease, "start_heartbeat", lambda self: None)
    monkeypatch.setattr(executions, "_abandon", lambda lease: None)
    return leases


@pytest.fixture
def names() -> Iterator[Callable[[str], str]]:
    made: list[tuple[str, str]] = []

    def name(kind: str) -> str:
        value = f"takeover-{kind}-{len(made)}"
        made.append((kind, value))
        return value

    yield name
    for kind, value in made:
        (unregister_store if kind == "store" else unregister_workflow)(value)


def _prune_intents(alias: str) -> None:
    call_command("yieldstar_prune", "--intents-age", "0", "--database", alias, stdout=io.StringIO())


def _pending_intents(execution_id: str) -> list[WakeIntent]:
    return list(WakeIntent.objects.filter(execution_id=execution_id, delivered_at__isnull=True))


@pytest.mark.parametrize(
    "prune", [pytest.param(True, id="pruned-then-renewed"), pytest.param(False, id="died-at-once")]
)
def test_a_run_again_under_a_lease_keeps_its_takeover_timer(
    routed: str,
    held: list[Lease],
    names: Callable[[str], str],
    wakes: WakeCollector,
    prune: bool,
) -> None:
    """The run again under the lease acknowledged the due takeover timer with the wake it
    ran for. Pruned before the keeper's next round, the timer was gone and the renewal's
    re-arm (by id) moved nothing; killed before that round, the timer stayed acknowledged.
    Either way the dead worker's execution stayed running with no wake due, forever."""
    alias = routed
    gate = define_store(names("store"), None, initial=lambda id: {"items": []})
    runs: list[int] = []

    def late() -> None:
        # A wake arrives while the lease is held (a resume elsewhere finds it held and
        # flags it), then the holder's renewals stop for longer than the lease (a paused
        # process): the lease expires and its takeover timer falls due, before any relay
        # delivered it.
        assert mark_wake_pending("e1")
        time.sleep(LEASE + TAKEOVER_MARGIN + 0.15)

    def wf(step: Step) -> Any:
        runs.append(len(runs))
        if len(runs) == 2:
            # The run again under the same lease, for the flagged wake, has started.
            if prune:  # retention runs now, then the lease keeper's next round
                _prune_intents(alias)
                assert held[0].renew()
            raise WorkerDied
        yield from step.run(late)
        # Waits on a store nobody writes: no timer of its own.
        return (yield from step.take(gate, "g", lambda s: s["items"][0] if s["items"] else None))

    name = names("wf")
    workflow(name)(wf)
    with configure(LEASE_SECONDS=LEASE, RELAY_DELAY=0.0):
        outside.start(alias, name, "e1")
        with pytest.raises(WorkerDied):
            executions.run_execution("e1")
        assert len(held) == 1 and runs == [0, 1], "one lease, two runs under it"
        execution = Execution.objects.get(pk="e1")
        assert execution.status == "running" and execution.lease_owner == held[0].token

        # The dead worker's lease expires; its takeover timer must fire then.
        assert _pending_intents("e1"), "the held lease has no pending takeover timer"
        wakes.clear()

        def resumed() -> bool:
            relay_once(using=alias)
            return any(w.execution_id == "e1" for w in wakes)

        wait_until("the takeover timer to resume the execution", resumed)

        assert Execution.objects.get(pk="e1").lease_expires_at < timezone.now()
        assert executions.run_execution("e1") == ResumeResult.SUSPENDED
    assert len(held) == 2 and runs == [0, 1, 2]


def test_running_again_acknowledges_the_due_intents_but_the_takeover_timer(routed: str) -> None:
    alias = routed
    outside.start(alias, "wf", "e2")
    lease = acquire_lease("e2")
    assert lease is not None and lease.timer is not None
    # The renewal came late: the takeover timer fell due; a wake arrived meanwhile.
    past = timezone.now() - timedelta(seconds=1)
    WakeIntent.objects.filter(pk=lease.timer).update(due_at=past, available_at=past)
    (wake,) = write_intents([Wake("e2", "wf")], reason="test", using=alias)
    assert mark_wake_pending("e2")
    with CaptureQueriesContext(connections[alias]) as queries:
        assert lease.run_again()
    if connections[alias].vendor == "postgresql":
        assert len(queries) == 1, [q["sql"] for q in queries.captured_queries]
    timer = WakeIntent.objects.get(pk=lease.timer)
    assert timer.delivered_at is None and timer.due_at > lease.expires_at
    assert WakeIntent.objects.get(pk=wake.intent_id).delivered_at is not None
    execution = Execution.objects.get(pk="e2")
    assert not execution.wake_pending and execution.lease_expires_at == lease.expires_at

    # A lease taken over meanwhile: nothing changes, and the run stops.
    Execution.objects.filter(pk="e2").update(lease_owner="successor", wake_pending=True)
    (other,) = write_intents([Wake("e2", "wf")], reason="test", using=alias)
    assert not lease.run_again()
    assert lease.lost.is_set()
    assert Execution.objects.get(pk="e2").wake_pending
    assert WakeIntent.objects.get(pk=other.intent_id).delivered_at is None
