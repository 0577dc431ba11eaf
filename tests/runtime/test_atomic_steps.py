"""``step.atomic``: a function's writes commit with the step's heap row, exactly once.

The function writes rows of a project's own model (``tests.shared.models.Entry``, no
unique constraint: a second commit of a step's writes would show as a second row). Runs
are real runs (``run_execution``) on PostgreSQL and SQLite; the races run in other
processes (``tests.shared.workers``) or threads, each with its own connection, on
PostgreSQL, where a takeover can happen while a function runs (SQLite's write lock, held
by the step's ``BEGIN IMMEDIATE`` transaction, keeps every other writer, a takeover
included, waiting until it ends).
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connections
from django.utils import timezone

from tests.polling import HANG_SECONDS, join_or_fail, wait_until
from tests.shared import race_workflows, workers
from tests.shared.fixtures import SHARED_BARRIER, Spawn, WakeCollector, _context, database_names
from tests.shared.models import Entry
from tests.shared.outside import runtime_on
from yieldstar_django import RetryableError, StoreContentionError, define_store
from yieldstar_django.connector import get_store_client
from yieldstar_django.core.durable import decode_durable
from yieldstar_django.models import Execution, ExecutionStep, WakeIntent
from yieldstar_django.runtime import Step, get_execution, start_workflow, workflow
from yieldstar_django.runtime.atomic_steps import is_write
from yieldstar_django.runtime.engine import Engine
from yieldstar_django.runtime.executions import run_execution
from yieldstar_django.runtime.leases import LeaseLost, acquire_lease
from yieldstar_django.runtime.registry import get_workflow

_names = itertools.count()

#: Calls of the test functions, by execution id.
CALLS: dict[str, int] = {}

inbox = define_store("test-atomic-inbox", None, initial=lambda id: {"items": []})


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}-{next(_names)}"


def entries(alias: str, execution_id: str) -> list[str]:
    return list(
        Entry.objects.using(alias).filter(execution_id=execution_id).values_list("token", flat=True)
    )


def heap_row(alias: str, execution_id: str, key: str) -> ExecutionStep:
    return ExecutionStep.objects.using(alias).get(execution_id=execution_id, step_key=key)


def write(execution_id: str, step: str) -> str:
    """Write one ``Entry`` (counting the call); its token."""
    CALLS[execution_id] = CALLS.get(execution_id, 0) + 1
    token = uuid.uuid4().hex
    Entry.objects.create(execution_id=execution_id, step=step, token=token)
    return token


def first(state: Any) -> Any:
    return state["items"][0] if state["items"] else None


def pop_first(draft: Any, selected: Any) -> None:
    draft["items"].pop(0)


@workflow("test-atomic-then-take")
def then_take(step: Step) -> Any:
    token = yield from step.atomic(write, step.execution_id, "a", key="a")
    item = yield from step.take(inbox, step.execution_id, first, pop_first)
    return [token, item]


def test_the_rows_commit_with_the_step_and_a_replay_returns_its_result_without_calling_it(
    alias: str, wakes: WakeCollector
) -> None:
    """The first run calls the function once, its row commits with the completed heap
    row (``atomic``, the token as its value); the run waits on a take. The replay after
    the wake returns the recorded token without calling the function again."""
    with runtime_on(alias):
        eid = start_workflow(then_take)
        assert run_execution(eid) == "suspended"
        assert CALLS[eid] == 1
        [token] = entries(alias, eid)
        row = heap_row(alias, eid, "a")
        assert (row.kind, row.status, row.attempts) == ("atomic", "completed", 1)
        assert decode_durable(row.value_json) == token
        get_store_client().update_store(inbox, eid, updater=lambda d: d["items"].append(7))
        assert run_execution(eid) == "finished"
        assert get_execution(eid).result == [token, 7]
        assert CALLS[eid] == 1
        assert entries(alias, eid) == [token]


def write_then_raise(execution_id: str) -> None:
    write(execution_id, "a")
    raise ValueError("declined")


@workflow("test-atomic-raises")
def raises(step: Step) -> Any:
    try:
        yield from step.atomic(write_then_raise, step.execution_id, key="a")
    except ValueError as exc:
        return f"caught: {exc}"
    return "not raised"


def test_an_error_rolls_the_rows_back_and_is_the_step_s_error(
    alias: str, wakes: WakeCollector
) -> None:
    """The function wrote a row, then raised: the row is rolled back, the error is
    recorded once as the step's (``failed``) and raised into the workflow, which catches
    it."""
    with runtime_on(alias):
        eid = start_workflow(raises)
        assert run_execution(eid) == "finished"
        assert get_execution(eid).result == "caught: declined"
        assert entries(alias, eid) == []
        row = heap_row(alias, eid, "a")
        assert (row.status, row.attempts) == ("failed", 1)
        assert decode_durable(row.error_json)["type"] == "builtins:ValueError"


def write_and_fail_first(execution_id: str) -> str:
    token = write(execution_id, "a")
    if CALLS[execution_id] == 1:
        raise RetryableError("busy", max_attempts=3, retry_interval=0)
    return token


@workflow("test-atomic-retried")
def retried(step: Step) -> Any:
    return (yield from step.atomic(write_and_fail_first, step.execution_id, key="a"))


def test_a_retryable_error_rolls_back_and_the_step_runs_again_on_a_timer(
    alias: str, wakes: WakeCollector
) -> None:
    """``RetryableError`` as in ``step.run``: the first attempt's row is rolled back, the
    step is ``pending`` (one attempt made) on a durable retry timer; the second attempt
    commits its row with the step."""
    with runtime_on(alias):
        eid = start_workflow(retried)
        assert run_execution(eid) == "suspended"
        assert get_execution(eid).status == "retrying"
        assert entries(alias, eid) == []
        row = heap_row(alias, eid, "a")
        assert (row.status, row.attempts) == ("pending", 1)
        assert WakeIntent.objects.filter(execution_id=eid, reason="retry").exists()
        assert run_execution(eid) == "finished"
        [token] = entries(alias, eid)
        assert get_execution(eid).result == token
        assert CALLS[eid] == 2
        row = heap_row(alias, eid, "a")
        assert (row.status, row.attempts) == ("completed", 2)


def write_then_contend_first(execution_id: str) -> str:
    token = write(execution_id, "a")
    if CALLS[execution_id] == 1:
        raise StoreContentionError("test-atomic-inbox", "s", 3)
    return token


@workflow("test-atomic-contended")
def contended(step: Step) -> Any:
    return (yield from step.atomic(write_then_contend_first, step.execution_id, key="a"))


def test_a_store_call_that_lost_every_race_runs_the_step_again_a_second_later(
    alias: str, wakes: WakeCollector
) -> None:
    """A ``StoreContentionError`` of the function (a store call of it that reached
    ``CAS_MAX_ATTEMPTS``) is settled as a store step's: its row rolled back, nothing
    recorded, the execution ``retrying`` on a ``contention`` timer; the next run commits
    the step."""
    with runtime_on(alias):
        eid = start_workflow(contended)
        assert run_execution(eid) == "suspended"
        assert get_execution(eid).status == "retrying"
        assert entries(alias, eid) == []
        assert not ExecutionStep.objects.filter(execution_id=eid).exists()
        assert WakeIntent.objects.filter(execution_id=eid, reason="contention").exists()
        assert run_execution(eid) == "finished"
        assert entries(alias, eid) == [get_execution(eid).result]


#: What the store-writing function saw of the wakes: the deliveries made by then.
SEEN: dict[str, int] = {}


def push_to(store_id: str, fail: bool, collector: WakeCollector, execution_id: str) -> int:
    """Push an item to ``inbox/store_id`` through the store client (and write a row);
    note the wakes delivered by then; raise if ``fail``. The new version."""
    write(execution_id, "push")
    client = get_store_client()
    result = client.update_store(inbox, store_id, updater=lambda d: d["items"].append(1))
    SEEN[execution_id] = len(collector)
    if fail:
        raise ValueError("after the push")
    return result.version


@workflow("test-atomic-waits")
def waits(step: Step, store_id: str) -> Any:
    return (yield from step.take(inbox, store_id, first, pop_first))


@workflow("test-atomic-pushes")
def pushes(step: Step, store_id: str, fail: bool) -> Any:
    try:
        return (yield from step.atomic(push_to, store_id, fail, COLLECTOR[0], step.execution_id))
    except ValueError:
        return "failed"


#: The test's wake collector, for the function (a durable argument cannot carry it).
COLLECTOR: list[WakeCollector] = []


@pytest.mark.parametrize("fail", [False, True], ids=["commits", "raises"])
def test_store_calls_of_the_function_join_its_transaction_and_wake_at_the_commit(
    alias: str, wakes: WakeCollector, fail: bool
) -> None:
    """An execution waits on a store; another's atomic function pushes to it with the
    store client. The push commits with the step: no wake is delivered while the function
    runs, the waiter's wake once the step committed. When the function raises after the
    push, the push is rolled back with it: the store is unchanged, nobody is woken."""
    COLLECTOR[:] = [wakes]
    with runtime_on(alias):
        store_id = unique("pushed")
        waiter = start_workflow(waits, store_id)
        assert run_execution(waiter) == "suspended"
        pusher = start_workflow(pushes, store_id, fail)
        before = len(wakes)
        assert run_execution(pusher) == "finished"
        assert SEEN[pusher] == before  # nothing delivered from inside the transaction
        snapshot = get_store_client().get_store(inbox, store_id)
        woken = [w.execution_id for w in wakes[before:]]
        intents = WakeIntent.objects.filter(execution_id=waiter, reason="store")
        if fail:
            assert get_execution(pusher).result == "failed"
            assert (snapshot.state, snapshot.version) == ({"items": []}, 0)
            assert waiter not in woken
            assert not intents.exists()
            assert entries(alias, pusher) == []
        else:
            assert get_execution(pusher).result == 1
            assert (snapshot.state, snapshot.version) == ({"items": [1]}, 1)
            assert waiter in woken
            assert len(entries(alias, pusher)) == 1


def write_here_and_there(execution_id: str, other: str) -> None:
    write(execution_id, "here")
    assert Entry.objects.using(other).filter(execution_id=execution_id).count() == 0  # a read
    Entry.objects.using(other).create(execution_id=execution_id, step="there", token="x")


@workflow("test-atomic-two-databases")
def two_databases(step: Step, other: str) -> Any:
    yield from step.atomic(write_here_and_there, step.execution_id, other, key="a")


@pytest.mark.parametrize(
    ("alias", "other"),
    [
        pytest.param("default", "sqlite", id="postgres", marks=pytest.mark.postgres),
        pytest.param("sqlite", "default", id="sqlite"),
    ],
)
@pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])
def test_a_write_through_another_alias_is_refused(
    alias: str, other: str, wakes: WakeCollector
) -> None:
    """The function reads the other database (allowed), then writes to it: the write is
    refused before it is sent (``CrossDatabaseWriteError``, naming both aliases), the
    function's row on the step's database is rolled back, and the execution fails with
    that error."""
    with runtime_on(alias):
        eid = start_workflow(two_databases, other)
        assert run_execution(eid) == "finished"
        execution = get_execution(eid)
        assert execution.status == "failed"
        assert execution.error is not None
        assert execution.error["type"] == "yieldstar_django.runtime.errors:CrossDatabaseWriteError"
        assert f"wrote through {other!r}" in execution.error["message"]
        assert f"on the database {alias!r}" in execution.error["message"]
    assert entries(alias, eid) == []
    assert entries(other, eid) == []


@pytest.mark.parametrize(
    ("sql", "writes"),
    [
        ("SELECT 1", False),
        ('  (SELECT "update" FROM t) UNION (SELECT 2)', False),
        ("SELECT * FROM t FOR UPDATE", False),
        ("SAVEPOINT s1", False),
        ("BEGIN IMMEDIATE", False),
        ("PRAGMA foreign_keys", False),
        ("WITH x AS (SELECT 1) SELECT * FROM x FOR NO KEY UPDATE", False),
        ("-- INSERT\nSELECT 'DELETE'", False),
        ('INSERT INTO "t" VALUES (1)', True),
        ("update t set a = 1", True),
        ("DELETE FROM t", True),
        ("WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d", True),
        ("CREATE TABLE t (a int)", True),
        ("PRAGMA user_version = 3", True),
        ("/* note */ TRUNCATE t", True),
        (b"INSERT INTO t VALUES (1)", True),
    ],
)
def test_which_statements_count_as_writes(sql: str | bytes, writes: bool) -> None:
    assert is_write(sql) is writes


# -- races on PostgreSQL ----------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True, databases=["default"])
def test_a_paused_run_and_its_successor_inside_the_function_commit_one_row(
    spawn: Spawn, wakes: WakeCollector
) -> None:
    """A run pauses inside the atomic function, after writing its row, until its lease
    expired; another process's run takes the lease over and reaches the same point, with
    its own row; then both go on and commit at once. Exactly one row commits, the
    successor's (the one the heap records and the workflow returns); the paused run's
    transaction, whose heap row the lease fence refuses, rolls its row back."""
    eid = unique("atomic-race")
    start_workflow(race_workflows.atomic_once, execution_id=eid)
    paused, successor = spawn(
        ["run_paused_then_expired", "run_after_the_expiry"],
        [("default", eid, SHARED_BARRIER)] * 2,
        yieldstar={"LEASE_SECONDS": 60},
    )
    assert (paused, successor) == ("lost", "finished")
    execution = get_execution(eid)
    assert execution.status == "completed"
    assert entries("default", eid) == [execution.result]
    assert decode_durable(heap_row("default", eid, "once").value_json) == execution.result


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True, databases=["default"])
def test_a_run_stopped_inside_the_function_and_taken_over_commits_nothing(
    tmp_path: Path, wakes: WakeCollector
) -> None:
    """A worker process is stopped (SIGSTOP, its lease keeper with it) inside the atomic
    function, its row written; its lease expires and another run takes the execution
    over, runs the step (its own row) and completes it. Continued, the stopped worker
    returns from the function and commits nothing: its run ends ``lost`` and the only row
    is the successor's."""
    inside, go = str(tmp_path / "inside"), str(tmp_path / "go")
    eid = start_workflow(race_workflows.atomic_gated, inside, go)
    ctx = _context()
    results = ctx.Queue()
    process = ctx.Process(
        target=workers.entry,
        args=("run_once", database_names(), {"LEASE_SECONDS": 60}, None, results, 0,
              ("default", eid)),
        daemon=True,
    )  # fmt: skip
    process.start()
    assert process.pid is not None
    try:
        wait_until("the worker to be inside the function", lambda: os.path.exists(inside))
        os.kill(process.pid, signal.SIGSTOP)
        expired = timezone.now() - timedelta(seconds=1)
        assert Execution.objects.filter(pk=eid).update(lease_expires_at=expired) == 1
        assert run_execution(eid) == "finished"
        Path(go).touch()
    finally:
        os.kill(process.pid, signal.SIGCONT)
    index, status, value = results.get(timeout=HANG_SECONDS)
    join_or_fail(process, what="the stopped worker")
    assert (index, status, value) == (0, "ok", "lost"), value
    execution = get_execution(eid)
    assert execution.status == "completed"
    assert entries("default", eid) == [execution.result]


#: Met inside the function by the two runs of ``test_two_runs_past_the_fence...``.
BARRIER: list[threading.Barrier] = []


def write_at_the_barrier(execution_id: str) -> str:
    token = write(execution_id, "a")
    BARRIER[0].wait(HANG_SECONDS)
    return token


@workflow("test-atomic-barrier")
def at_the_barrier(step: Step) -> Any:
    token = yield from step.atomic(write_at_the_barrier, step.execution_id, key="a")
    yield from step.sleep(3600)
    return token


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True, databases=["default"])
def test_two_runs_past_the_fence_commit_one_row(wakes: WakeCollector) -> None:
    """Two runs under one lease (both pass the lease fence, as a run whose lease is taken
    over between its heap row's insert and its commit would), each on its own connection,
    are inside the function at once and then record the step together. The unique
    (execution, step key) of the heap lets one row in: the other insert waits for the
    first transaction, then inserts nothing, and its run ends (``LeaseLost``) with its
    function's row rolled back."""
    BARRIER[:] = [threading.Barrier(2)]
    eid = start_workflow(at_the_barrier)
    lease = acquire_lease(eid)
    assert lease is not None
    outcomes: list[Any] = []

    def run() -> None:
        try:
            engine = Engine(get_workflow("test-atomic-barrier"), lease, get_store_client())
            outcomes.append(engine.run().status)
        except BaseException as exc:  # reported below
            outcomes.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    join_or_fail(*threads, what="the two runs")
    lost = [o for o in outcomes if isinstance(o, LeaseLost)]
    assert len(lost) == 1 and outcomes.count("sleeping") == 1, outcomes
    [token] = entries("default", eid)
    assert decode_durable(heap_row("default", eid, "a").value_json) == token
    assert CALLS[eid] == 2
