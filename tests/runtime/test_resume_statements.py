"""The statements of a woken ``take`` on PostgreSQL: what a wake costs before its step is
recorded (the figure behind the wake latency on the performance page)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from yieldstar_django.core.definition import StoreDefinition
from yieldstar_django.models import AppliedStep, Execution, ExecutionStep, Waiter, WakeIntent
from yieldstar_django.runtime import Step, executions, get_execution, start_workflow, statements
from yieldstar_django.runtime.executions import run_execution
from yieldstar_django.runtime.leases import acquire_lease
from yieldstar_django.runtime.take_any import GIVE_WAY_AFTER_MS
from yieldstar_django.wakes.outbox import schedule_wake

from .conftest import Runtime

HEAP_ROW = "UPDATE yieldstar_execution_step"


def first(state: Any) -> Any:
    return state["items"][0] if state["items"] else None


def pop_first(draft: Any, selected: Any) -> None:
    draft["items"].pop(0)


def waiting_take(pg: Runtime) -> tuple[StoreDefinition, str]:
    """A store, and an execution whose take from it waits (its waiter registered)."""
    inbox = pg.define()

    @pg.workflow
    def wf(step: Step) -> Any:
        return (yield from step.take(inbox, "q", first, pop_first))

    eid = start_workflow(wf)
    pg.pump()
    return inbox, eid


def acquire_then_lose(execution_id: str) -> Any:
    """``acquire_lease``, after which another run takes the lease over."""
    lease = acquire_lease(execution_id)
    assert lease is not None
    Execution.objects.filter(pk=execution_id).update(lease_owner="successor")
    return lease


@pytest.fixture
def pg(rt: Runtime) -> Runtime:
    if rt.client.__class__.__name__ == "MemoryStoreClient" or connection.vendor != "postgresql":
        pytest.skip(
            "needs the database client on PostgreSQL, where the lease reads the heap and stores"
        )
    return rt


def test_a_woken_take_reaches_its_heap_row_in_two_statements(pg: Runtime) -> None:
    """Taking the lease, which also reads the ledger and the store the take waits on (one
    statement, not waiting for a WAL flush), and the commit function (opening the take's
    transaction), which also drops the take's own waiter: no statement of its own reads
    the store or deletes the waiter. Then the heap row, the commit and the release."""
    inbox, eid = waiting_take(pg)
    assert Waiter.objects.filter(execution_id=eid).count() == 1
    pg.client.update_store(inbox, "q", updater=lambda d: d["items"].append("job"))
    with CaptureQueriesContext(connection) as captured:
        run_execution(eid)
    statements = [q["sql"] for q in captured.captured_queries if q["sql"] != "BEGIN"]
    heap = next(i for i, s in enumerate(statements) if s.startswith(HEAP_ROW))
    acquire, commit = statements[:heap]
    assert "set_config('synchronous_commit', 'off', true)" in acquire
    assert "yieldstar_appliedstep" in acquire and "yieldstar_storeinstance" in acquire
    assert "yieldstar_commit_mutation_v4" in commit
    assert not [s for s in statements if s.startswith("DELETE") and "yieldstar_waiter" in s]
    assert get_execution(eid).result == "job"
    assert not Waiter.objects.filter(execution_id=eid).exists()


def resumed_for_nothing(
    pg: Runtime, store: StoreDefinition, winner: str, loser: str
) -> tuple[int, list[str]]:
    """Push one item to ``store`` (both executions waiting on it), let ``winner`` take it,
    then resume ``loser``, which finds nothing: the push's version and the statements of
    the loser's run."""
    pushed = pg.client.update_store(store, "q", updater=lambda d: d["items"].append("job"))
    assert run_execution(winner) == executions.ResumeResult.FINISHED
    with CaptureQueriesContext(connection) as captured:
        assert run_execution(loser) == executions.ResumeResult.SUSPENDED
    return pushed.version, [q["sql"] for q in captured.captured_queries]


def test_a_woken_take_finding_nothing_registers_again_in_one_statement(pg: Runtime) -> None:
    """A take woken for an item another taker got (the herd of takers on one queue): the
    lease, the take's read, the registration (one function call, which replaces the step's
    waiter) and the release; no transaction of its own, no deletion of the waiter first."""
    inbox = pg.define()

    @pg.workflow
    def wf(step: Step) -> Any:
        return (yield from step.take(inbox, "q", first, pop_first))

    winner, loser = start_workflow(wf), start_workflow(wf)
    pg.pump()
    pushed, sent = resumed_for_nothing(pg, inbox, winner, loser)
    assert len(sent) == 4, sent
    assert "yieldstar_register_waiter_v3" in sent[2]
    assert not [s for s in sent if s in ("BEGIN", "COMMIT") or s.startswith("DELETE")]
    waiter = Waiter.objects.get(execution_id=loser)
    assert (waiter.since_version, waiter.woken_at) == (pushed + 1, None)


def test_a_woken_take_any_finding_nothing_registers_each_choice_again(pg: Runtime) -> None:
    """As a ``take``: a ``take_any`` (no timeout) woken for an item another execution got
    registers each choice's waiter again, replacing it (one call each, in one transaction:
    one WAL flush, whose lock waits give way after ``GIVE_WAY_AFTER_MS``), with no
    deletion of its waiters first."""
    a, b = pg.define(), pg.define()

    @pg.workflow
    def wf(step: Step) -> Any:
        return list(
            (yield from step.take_any([(a, "q", first, pop_first), (b, "q", first, pop_first)]))
        )

    winner, loser = start_workflow(wf), start_workflow(wf)
    pg.pump()
    before = {w.step_key: w.pk for w in Waiter.objects.filter(execution_id=loser)}
    pushed, sent = resumed_for_nothing(pg, a, winner, loser)
    begin = sent.index("BEGIN")
    assert sent[begin + 1] == f"SET LOCAL lock_timeout = '{GIVE_WAY_AFTER_MS}ms'", sent
    registrations = sent[begin + 2 : begin + 4]
    assert all("yieldstar_register_waiter_v3" in s for s in registrations), sent
    assert sent[begin + 4] == "COMMIT", sent
    assert not [s for s in sent if s.startswith("DELETE")], sent
    waiters = {w.step_key: w for w in Waiter.objects.filter(execution_id=loser)}
    assert {k: w.pk for k, w in waiters.items()} == before, "each waiter kept its place"
    assert waiters["0#0"].since_version == pushed + 1, "a saw the winner's claim"
    assert all(w.woken_at is None for w in waiters.values())
    pg.client.update_store(b, "q", updater=lambda d: d["items"].append("late"))
    assert run_execution(loser) == executions.ResumeResult.FINISHED
    assert get_execution(loser).result == [1, "late"]
    assert not Waiter.objects.filter(execution_id=loser).exists()


def test_a_woken_single_choice_take_any_registers_again_in_one_statement(pg: Runtime) -> None:
    """One choice and no timeout: the lease, the read, the registration and the release,
    with no transaction of its own."""
    a = pg.define()

    @pg.workflow
    def wf(step: Step) -> Any:
        return list((yield from step.take_any([(a, "q", first, pop_first)])))

    winner, loser = start_workflow(wf), start_workflow(wf)
    pg.pump()
    _, sent = resumed_for_nothing(pg, a, winner, loser)
    assert len(sent) == 4 and "yieldstar_register_waiter_v3" in sent[2], sent
    assert Waiter.objects.get(execution_id=loser).woken_at is None


def test_finishing_acknowledges_every_intent_in_the_release(pg: Runtime) -> None:
    """An execution that finishes acknowledges all its wake intents (a timer not yet due
    included) in the statement that releases its lease: no statement of its own follows."""
    inbox, eid = waiting_take(pg)
    execution = get_execution(eid)
    timer = schedule_wake(eid, execution.workflow_id, timezone.now() + timedelta(hours=1))
    pg.client.update_store(inbox, "q", updater=lambda d: d["items"].append("job"))
    with CaptureQueriesContext(connection) as captured:
        assert run_execution(eid) == executions.ResumeResult.FINISHED
    sent = [q["sql"] for q in captured.captured_queries if q["sql"] not in ("BEGIN", "COMMIT")]
    release = next(i for i, s in enumerate(sent) if s.startswith("WITH released AS"))
    assert "acked AS" in sent[release]
    assert release == len(sent) - 1, sent[release + 1 :]
    assert not WakeIntent.objects.filter(execution_id=eid, delivered_at__isnull=True).exists()
    assert WakeIntent.objects.get(pk=timer).delivered_at is not None


def test_a_lost_lease_acknowledges_nothing_when_finishing(
    pg: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The acknowledgement is part of the release: a run whose lease was taken over before
    it finished leaves the intents to the holder."""

    @pg.workflow
    def wf(step: Step) -> Any:
        if False:  # a generator that finishes without a step
            yield
        return 1

    eid = start_workflow(wf)
    execution = get_execution(eid)
    timer = schedule_wake(eid, execution.workflow_id, timezone.now() + timedelta(hours=1))

    monkeypatch.setattr(executions, "acquire_lease", acquire_then_lose)
    assert run_execution(eid) == executions.ResumeResult.LOST
    assert WakeIntent.objects.get(pk=timer).delivered_at is None


def test_a_woken_take_whose_lease_is_lost_commits_nothing(
    pg: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The heap row of a woken take is fenced by the lease, in the transaction of the
    store's commit: a lease taken over between the acquisition and the commit rolls the
    commit back, so the store keeps its item, the ledger has no row, the heap row stays
    pending, and the run ends ``LOST``."""
    inbox, eid = waiting_take(pg)
    pushed = pg.client.update_store(inbox, "q", updater=lambda d: d["items"].append("job"))

    monkeypatch.setattr(executions, "acquire_lease", acquire_then_lose)
    assert run_execution(eid) == executions.ResumeResult.LOST
    after = pg.client.get_store(inbox, "q")
    assert (after.state, after.version) == ({"items": ["job"]}, pushed.version)
    assert not AppliedStep.objects.filter(execution_id=eid).exists()
    assert ExecutionStep.objects.get(execution_id=eid, step_key="0").status == "pending"


def test_a_take_finding_nothing_in_the_lease_read_reads_again(
    pg: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The row read with the lease is older than the take: a take that finds nothing in it
    does not return unmatched on it (a stale read: an item pushed before the take began
    would be missed, the fault suite's checker flags it); it reads the store again, as a
    remembered snapshot is confirmed, and takes the item in the same run."""
    inbox, eid = waiting_take(pg)

    def acquire_then_push(execution_id: str) -> Any:
        lease = acquire_lease(execution_id)
        assert lease is not None and lease.reads, "the acquisition read the empty store"
        pg.client.update_store(inbox, "q", updater=lambda d: d["items"].append("job"))
        return lease

    monkeypatch.setattr(executions, "acquire_lease", acquire_then_push)
    assert run_execution(eid) == executions.ResumeResult.FINISHED
    assert get_execution(eid).result == "job"


def test_a_large_store_is_not_read_with_the_lease(pg: Runtime) -> None:
    """A waited store whose state is over ``MAX_READ_AHEAD`` bytes is left out of the
    acquisition (a wake carries no megabytes it may not use): the take reads it itself."""
    inbox, eid = waiting_take(pg)
    big = "x" * (statements.MAX_READ_AHEAD + 1)
    pg.client.update_store(inbox, "q", updater=lambda d: d["items"].append(big))
    lease = acquire_lease(eid)
    assert lease is not None and lease.reads == {}
    Execution.objects.filter(pk=eid).update(lease_owner="")  # as if that run had ended
    run_execution(eid)
    assert get_execution(eid).result == big


def test_only_the_lease_commit_skips_the_flush(pg: Runtime) -> None:
    """The relaxed flush is local to the acquisition's own transaction: the next statement
    runs with ``synchronous_commit`` as configured; inside a caller's ``atomic`` the
    acquisition does not relax it (the caller's commit stays durable)."""

    @pg.workflow
    def wf(step: Step) -> Any:
        return (yield from step.sleep(3600))

    def setting() -> str:
        with connection.cursor() as cursor:
            cursor.execute("SHOW synchronous_commit")
            return str(cursor.fetchone()[0])

    configured = setting()
    first_id, second_id = start_workflow(wf), start_workflow(wf)
    assert acquire_lease(first_id) is not None
    assert setting() == configured
    with transaction.atomic():
        assert acquire_lease(second_id) is not None
        assert setting() == configured


def test_with_autocommit_off_the_acquisition_leaves_the_flush_alone(pg: Runtime) -> None:
    """A caller that turned autocommit off (``transaction.set_autocommit(False)``) is in a
    transaction of its own outside any ``atomic`` block: relaxing the flush there would make
    the caller's whole transaction commit without waiting for the WAL."""

    @pg.workflow
    def wf(step: Step) -> Any:
        return (yield from step.sleep(3600))

    execution_id = start_workflow(wf)
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        configured = str(cursor.fetchone()[0])
    transaction.set_autocommit(False)
    try:
        assert acquire_lease(execution_id) is not None
        with connection.cursor() as cursor:
            cursor.execute("SHOW synchronous_commit")
            assert str(cursor.fetchone()[0]) == configured
    finally:
        transaction.rollback()
        transaction.set_autocommit(True)


def test_a_store_changed_since_the_lease_was_taken_is_read_again(
    pg: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The row read with the lease is only a first snapshot: when another writer changes
    the store between the acquisition and the take, the commit conflicts and the take runs
    again on the current state (it takes what is there now, nothing twice)."""
    inbox, eid = waiting_take(pg)
    pg.client.update_store(inbox, "q", updater=lambda d: d["items"].append("early"))

    def acquire_then_change(execution_id: str) -> Any:
        lease = acquire_lease(execution_id)
        assert lease is not None and lease.reads, "the acquisition read the store"
        pg.client.update_store(inbox, "q", updater=lambda d: d.update(items=["late"]))
        return lease

    monkeypatch.setattr(executions, "acquire_lease", acquire_then_change)
    run_execution(eid)
    assert get_execution(eid).result == "late"
    assert pg.client.get_store(inbox, "q").state == {"items": []}


def test_the_hot_statements_run_prepared_where_the_connection_asks(pg: Runtime) -> None:
    """With psycopg's ``prepare_threshold`` (Django's ``OPTIONS``; 0 here: at first use)
    the lease acquisition, the store's read and commit and the heap's fenced writes are
    prepared on the server, and work so: typed parameters, reused across executions."""

    def double(x: int) -> int:
        return 2 * x

    inbox = pg.define()

    @pg.workflow
    def wf(step: Step) -> Any:
        first_value = yield from step.run(double, 1)
        second_value = yield from step.run(double, first_value)
        taken = yield from step.take(inbox, "q", first, pop_first)
        return [second_value, taken]

    connection.ensure_connection()
    raw = connection.connection
    previous = raw.prepare_threshold
    raw.prepare_threshold = 0
    try:
        eids = [start_workflow(wf) for _ in range(3)]
        pg.pump()
        pg.client.update_store(inbox, "q", updater=lambda d: d["items"].extend(["a", "b", "c"]))
        pg.settle()
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement FROM pg_prepared_statements")
            prepared = [row[0] for row in cursor.fetchall()]
    finally:
        raw.prepare_threshold = previous
    assert sorted(get_execution(e).result[1] for e in eids) == ["a", "b", "c"]
    assert all(get_execution(e).result[0] == 4 for e in eids)
    for needle in ("WITH acquired", "INSERT INTO yieldstar_execution_step", "commit_mutation_v4"):
        assert any(needle in statement for statement in prepared), needle
