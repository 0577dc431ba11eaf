"""Retention and cancellation racing executions: what ``prune_finished`` may delete while
an execution's leased claim is held, and what a cancel leaves behind (on the database
client, PostgreSQL or SQLite)."""

from __future__ import annotations

import threading
import time
from functools import partial
from typing import Any

import pytest
from django.db import connection, connections

from tests.polling import HANG_SECONDS, join_or_fail
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
    barrier = threading.Barrier(4, timeout=HANG_SECONDS)
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
    join_or_fail(*threads, what="the hand-backs and prunes")
    assert not errors, errors
    expire_due(now=later(), client=rt.client)
    prune_finished(older_than=0)
    assert sorted(state(rt, q)) == sorted(items)
    assert not Execution.objects.filter(pk__in=ids).exists()
    assert list(AppliedStep.objects.filter(execution_id__in=ids).values_list("pk", flat=True)) == []
    assert not ClaimLeaseRecord.objects.filter(execution_id__in=ids).exists()


def in_threads(*functions: Any) -> list[Any]:
    """Run ``functions`` at once, each in a thread of its own (its own connection), behind
    a barrier; return their results in order (an exception fails the test)."""
    barrier = threading.Barrier(len(functions), timeout=HANG_SECONDS)
    results: list[Any] = [None] * len(functions)
    errors: list[BaseException] = []

    def call(index: int, function: Any) -> None:
        try:
            barrier.wait()
            results[index] = function()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=call, args=item) for item in enumerate(functions)]
    for thread in threads:
        thread.start()
    join_or_fail(*threads, what="the racing threads")
    assert not errors, errors
    return results


@pytest.fixture
def pg_rt(db_rt: Runtime) -> Runtime:
    if connection.vendor != "postgresql":
        pytest.skip("SQLite serializes every writer")
    return db_rt


def test_cancel_racing_completion_ends_in_exactly_one_of_them(pg_rt: Runtime) -> None:
    """A run about to complete and a cancel, 20 times, the cancel a little later each
    time (both outcomes occur): either the cancel said ``True`` and the execution is
    ``cancelled`` with no result, or it said ``False`` and the execution is
    ``completed``; never both, never neither."""
    rt = pg_rt
    from yieldstar_django.runtime.executions import ResumeResult, run_execution

    @rt.workflow
    def wf(step: Step) -> Any:
        return (yield from step.run(str, "done"))

    def cancel_later(execution_id: str, n: int) -> bool:
        time.sleep(n * 0.003)  # from at once to well after the run: both outcomes occur
        return cancel_execution(execution_id)

    outcomes: list[str] = []
    for n in range(20):
        eid = start_workflow(wf, execution_id=f"race-{n}")
        rt.resumes.clear()
        ran, cancelled = in_threads(partial(run_execution, eid), partial(cancel_later, eid, n))
        execution = get_execution(eid)
        if cancelled:
            assert ran in (ResumeResult.LOST, ResumeResult.GONE), ran
            assert (execution.status, execution.result_json) == ("cancelled", "")
        else:
            assert ran == ResumeResult.FINISHED
            assert (execution.status, execution.result) == ("completed", "done")
        assert cancel_execution(eid) is False
        outcomes.append(execution.status)
        rt.settle()
        assert get_execution(eid).status == execution.status
    assert set(outcomes) <= {"cancelled", "completed"}, outcomes


def test_cancel_during_a_run_in_another_thread_records_nothing_more(pg_rt: Runtime) -> None:
    """A run holds the lease (in another thread) inside a ``run`` step when the execution
    is cancelled: the step's result, the next step and the relay record nothing, and
    cancelling again says ``False``; four cancels at once say ``True`` once."""
    rt = pg_rt
    from yieldstar_django.models import ExecutionStep, Waiter, WakeIntent
    from yieldstar_django.runtime.executions import ResumeResult, run_execution

    started, go_on = threading.Event(), threading.Event()
    gate = rt.define()

    def slow() -> str:
        started.set()
        assert go_on.wait(HANG_SECONDS), "the test never let the step go on"
        return "slow"

    @rt.workflow
    def wf(step: Step) -> Any:
        yield from step.run(slow)
        yield from step.take(gate, "g", first)
        return "never"

    eid = start_workflow(wf)
    rt.resumes.clear()

    def run() -> Any:
        return run_execution(eid)

    def cancel_when_running() -> list[Any]:
        assert started.wait(HANG_SECONDS), "the run never started its step"
        assert get_execution(eid).status == "running"
        results = in_threads(*[lambda: cancel_execution(eid)] * 4)
        go_on.set()
        return results

    ran, cancels = in_threads(run, cancel_when_running)
    assert ran == ResumeResult.LOST
    assert sorted(cancels) == [False, False, False, True]
    execution = get_execution(eid)
    assert execution.status == "cancelled" and execution.lease_owner == ""
    assert not ExecutionStep.objects.filter(execution_id=eid, status="completed").exists()
    assert not Waiter.objects.filter(execution_id=eid).exists()
    rt.settle()  # the relay: the lease timer and any wake find it finished
    assert get_execution(eid).runs == execution.runs
    assert not WakeIntent.objects.filter(execution_id=eid, delivered_at__isnull=True).exists()


def test_cancel_of_a_sleeping_or_woken_execution_is_not_resurrected(pg_rt: Runtime) -> None:
    """A sleeping execution (a timer intent) and a waiting one whose wake is in flight (an
    item was pushed, the resume not yet run) are cancelled: the timer and the wake find
    them finished, nothing is claimed, no waiter is left, and pruning then deletes them
    with every row that names them."""
    rt = pg_rt
    from yieldstar_django import clock
    from yieldstar_django.models import Execution, ExecutionStep, Waiter, WakeIntent

    q = rt.define()

    @rt.workflow
    def sleeper(step: Step) -> Any:
        yield from step.sleep(60)
        return "woke"

    @rt.workflow
    def taker(step: Step) -> Any:
        return (yield from step.take(q, "q", first, pop_first))

    asleep, waiting = start_workflow(sleeper), start_workflow(taker)
    rt.settle()
    assert get_execution(asleep).status == "sleeping"
    assert get_execution(waiting).status == "waiting"
    assert Waiter.objects.filter(execution_id=waiting).exists()
    rt.client.update_store(q, "q", updater=lambda d: d["items"].append("item"))  # wakes it
    assert in_threads(lambda: cancel_execution(asleep), lambda: cancel_execution(waiting)) == [
        True,
        True,
    ]
    clock.advance(120)
    try:
        rt.settle()
    finally:
        clock.reset()
    for eid in (asleep, waiting):
        execution = get_execution(eid)
        assert execution.status == "cancelled" and execution.result_json == ""
    assert rt.client.get_store(q, "q").state == {"items": ["item"]}
    assert not Waiter.objects.filter(execution_id=waiting).exists()
    assert prune_finished(older_than=0).executions == 2
    for model in (ExecutionStep, Waiter, WakeIntent, AppliedStep):
        assert not model.objects.filter(execution_id__in=[asleep, waiting]).exists()
    assert not Execution.objects.exists()
