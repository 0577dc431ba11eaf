"""Retention and cancellation racing executions: what ``prune_finished`` may delete while
an execution's leased claim is held, and what a cancel leaves behind (on the database
client, PostgreSQL or SQLite)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection, connections

from yieldstar_django.models import AppliedStep, ClaimLeaseRecord, Execution
from yieldstar_django.retention import prune_finished
from yieldstar_django.runtime import Step, cancel_execution, get_execution, start_workflow
from yieldstar_django.runtime.claim_leases import expire_due

from .conftest import Runtime
from .test_claim_leases import first, later, pop_first, queue, state


@pytest.fixture
def db_rt(rt: Runtime, client_kind: str) -> Runtime:
    if client_kind != "db":
        pytest.skip("retention deletes the database's rows; the memory client keeps its own")
    return rt


def test_an_execution_id_pruned_and_started_again_gets_a_claim_lease_of_its_own(
    db_rt: Runtime,
) -> None:
    """The retention page says a pruned execution's id is free and a new execution with it
    replays nothing. Its claim lease rows were not pruned: the new execution's leased take
    found the old, completed lease (same id, ``<execution>/<step key>``), so its
    ``complete`` said ``False`` and nothing would ever hand its item back."""
    rt = db_rt
    q = queue(rt, ["job-1", "job-2"])

    @rt.workflow
    def wf(step: Step) -> Any:
        lease = yield from step.take(q, "q", first, pop_first, lease=30)
        return [lease.value, (yield from step.complete(lease))]

    eid = start_workflow(wf, execution_id="reused")
    rt.settle(lambda: get_execution(eid).is_finished)
    assert get_execution(eid).result == ["job-1", True]
    assert prune_finished(older_than=0).executions == 1
    assert not ClaimLeaseRecord.objects.filter(execution_id=eid).exists()

    eid = start_workflow(wf, execution_id="reused")
    rt.settle(lambda: get_execution(eid).is_finished)
    assert get_execution(eid).result == ["job-2", True]
    assert ClaimLeaseRecord.objects.get(execution_id=eid).state == "completed"


def test_a_cancelled_execution_is_kept_while_its_claim_lease_is_held(db_rt: Runtime) -> None:
    """A cancelled execution's held lease is handed back when it expires (claim-leases
    page). Pruning it before then left the lease held with no execution: the hand-back
    then wrote a ledger row under the pruned id that no pruning ever deletes, and an
    execution started again with that id took an item under the old, expired lease, which
    nothing hands back (the item was lost)."""
    rt = db_rt
    q = queue(rt, ["job-1"])
    gate = rt.define()

    @rt.workflow
    def wf(step: Step) -> Any:
        lease = yield from step.take(q, "q", first, pop_first, lease=5)
        yield from step.take(gate, "g", first)  # waits until cancelled
        return (yield from step.complete(lease))

    eid = start_workflow(wf, execution_id="held")
    rt.pump()
    assert state(rt, q) == []
    assert cancel_execution(eid) is True
    assert prune_finished(older_than=0).executions == 0, "its lease is still held"
    assert get_execution(eid).status == "cancelled"

    assert expire_due(now=later(), client=rt.client) == 1
    assert state(rt, q) == ["job-1"]
    assert prune_finished(older_than=0).executions == 1
    assert not ClaimLeaseRecord.objects.filter(execution_id=eid).exists()
    assert not AppliedStep.objects.filter(execution_id=eid).exists()

    # The id is free: a new execution with it takes the item under a lease of its own,
    # which its expiry hands back after a cancel.
    eid = start_workflow(wf, execution_id="held")
    rt.pump()
    assert state(rt, q) == []
    assert ClaimLeaseRecord.objects.get(execution_id=eid).state == "held"
    assert cancel_execution(eid) is True
    assert expire_due(now=later(), client=rt.client) == 1
    assert state(rt, q) == ["job-1"]


def test_pruners_racing_hand_backs_leave_no_ledger_row_of_a_pruned_execution(
    db_rt: Runtime,
) -> None:
    """Ten cancelled executions each hold a leased claim; two threads hand the expired
    leases back while two prune (each its own PostgreSQL connection). Every item comes
    back once, and once all is pruned no ledger row or claim lease names a pruned
    execution (a hand-back committed after its execution was pruned left one for ever)."""
    rt = db_rt
    if connection.vendor != "postgresql":
        pytest.skip("SQLite serializes the pruners and the hand-backs")
    items = [f"job-{n}" for n in range(10)]
    q = queue(rt, items)
    gate = rt.define()

    @rt.workflow
    def wf(step: Step) -> Any:
        lease = yield from step.take(q, "q", first, pop_first, lease=5)
        yield from step.take(gate, "g", first)
        return (yield from step.complete(lease))

    ids = [start_workflow(wf, execution_id=f"race-{n}") for n in range(10)]
    rt.settle()
    assert state(rt, q) == []
    for eid in ids:
        assert cancel_execution(eid) is True
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def hand_back() -> None:
        try:
            barrier.wait()
            for _ in range(10):
                expire_due(now=later(), client=rt.client, limit=1)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    def prune() -> None:
        try:
            barrier.wait()
            for _ in range(20):
                prune_finished(older_than=0, batch_size=2)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=f) for f in (hand_back, hand_back, prune, prune)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    expire_due(now=later(), client=rt.client)
    prune_finished(older_than=0)
    assert sorted(state(rt, q)) == sorted(items)
    assert not Execution.objects.filter(pk__in=ids).exists()
    assert list(AppliedStep.objects.filter(execution_id__in=ids).values_list("pk", flat=True)) == []
    assert not ClaimLeaseRecord.objects.filter(execution_id__in=ids).exists()
