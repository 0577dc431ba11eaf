"""User code runs outside any storage transaction; a step's heap row commits with the store.

While an updater, a selector or a claim runs (from a workflow step, through the engine, or
from the plain client) a second writer on its own connection commits to the same store.
The user code waits for an event that the second writer sets once its commit returned, so
a held write lock (SQLite's ``BEGIN IMMEDIATE``) or a held row lock would leave both
waiting until a timeout fails the test. On PostgreSQL the second writer also checks, from
``pg_stat_activity``, that the user code's connection has no transaction open.

The heap row is written inside the store commit's transaction, fenced by the lease: a
lease taken away while the updater runs, or a process killed between the commit's
statements and the heap row, records neither the store change (nor its ledger entry) nor
the heap row; the step then commits once when the execution runs again.
"""

from __future__ import annotations

import itertools
import multiprocessing
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections
from django.utils import timezone

from tests.connections import pooled
from tests.polling import join_or_fail
from tests.shared import outside
from tests.shared.fixtures import WakeCollector, _context, database_names
from yieldstar_django.connector import get_store_client
from yieldstar_django.core.definition import (
    StoreDefinition,
    define_store,
    get_definition,
    unregister_store,
)
from yieldstar_django.core.durable import decode_durable
from yieldstar_django.core.results import StoreStepId, StoreWaiter
from yieldstar_django.models import AppliedStep, Execution, ExecutionStep
from yieldstar_django.runtime.leases import LeaseLost
from yieldstar_django.runtime.registry import unregister_workflow, workflow
from yieldstar_django.runtime.steps import Step

#: Seconds an event may take before the test fails (a blocked writer never sets it).
WAIT = 30.0

_names = itertools.count()


class Gate:
    """Blocks the first call of the user code until the second writer has committed."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.done = threading.Event()

    def __call__(self) -> None:
        if self.started.is_set():
            return
        self.started.set()
        if not self.done.wait(WAIT):
            raise AssertionError("the second writer did not commit while user code ran")


class SecondWriter(threading.Thread):
    """Once the gate opened: (PostgreSQL) checks that ``pid`` has no transaction open,
    then runs ``action`` on this thread's own connection and releases the gate."""

    def __init__(self, alias: str, gate: Gate, action: Callable[[], None]) -> None:
        super().__init__(daemon=True)
        self.alias = alias
        self.gate = gate
        self.action = action
        self.errors: list[str] = []
        connection = connections[alias]
        connection.ensure_connection()
        self.pid: int | None = None
        # Behind a transaction pooler the pid is the pooler's, and a client outside a
        # transaction holds no server connection at all: the second writer's commit is
        # what shows that no lock is held.
        if connection.vendor == "postgresql" and not pooled():
            self.pid = connection.connection.info.backend_pid

    def run(self) -> None:
        try:
            if not self.gate.started.wait(WAIT):
                raise AssertionError("the user code never ran")
            if self.pid is not None:
                with connections[self.alias].cursor() as cursor:
                    cursor.execute(
                        "SELECT state, xact_start IS NOT NULL FROM pg_stat_activity WHERE pid = %s",
                        [self.pid],
                    )
                    state, open_transaction = cursor.fetchone()
                if open_transaction:
                    self.errors.append(f"a transaction is open while user code runs ({state})")
            self.action()
        except BaseException as exc:
            self.errors.append(repr(exc))
        finally:
            self.gate.done.set()
            connections.close_all()

    def finish(self) -> None:
        self.join(WAIT)
        assert not self.is_alive()
        assert self.errors == []


@pytest.fixture
def names() -> Iterator[Callable[[str], str]]:
    stores: list[str] = []
    workflows: list[str] = []

    def name(kind: str) -> str:
        value = f"outside-{kind}-{next(_names)}"
        (stores if kind == "store" else workflows).append(value)
        return value

    yield name
    for store in stores:
        unregister_store(store)
    for wf in workflows:
        unregister_workflow(wf)


@pytest.fixture
def routed(alias: str) -> Iterator[str]:
    """``alias``, with the runtime's tables on it."""
    with outside.runtime_on(alias):
        yield alias


def _queue(name: str) -> StoreDefinition:
    return define_store(name, None, initial=lambda id: {"items": [1], "n": 0})


def _push(alias: str, store: StoreDefinition) -> Callable[[], None]:
    def push() -> None:
        get_store_client(alias).update_store(
            store, "s", updater=lambda d: d.update(items=[*d["items"], 2], n=d["n"] + 1)
        )

    return push


def run_while_pushed(
    alias: str, name: str, wf: Callable[..., Any], store: StoreDefinition, gate: Gate
) -> Any:
    """Register ``wf`` as ``name``, start execution ``e1`` and run it once while a second
    writer pushes to ``store`` (when ``gate`` opens in user code): the run's outcome."""
    workflow(name)(wf)
    get_store_client(alias).get_store(store, "s")
    outside.start(alias, name, "e1")
    writer = SecondWriter(alias, gate, _push(alias, store))
    writer.start()
    outcome = outside.run_once(alias, name, "e1")
    writer.finish()
    return outcome


def _operation(kind: str, gate: Gate) -> tuple[Any, Any, Any]:
    """(updater, selector, claim) with ``gate`` in the callback named by ``kind``."""

    def updater(d: Any) -> None:
        gate()
        d["n"] += 10

    def selector(s: Any) -> Any:
        if kind == "selector":
            gate()
        return s["items"][0] if s["items"] else None

    def claim(d: Any, selected: Any) -> None:
        if kind == "claim":
            gate()
        d["items"].pop(0)

    return updater, selector, claim


@pytest.mark.parametrize("kind", ["updater", "selector", "claim"])
def test_a_second_writer_commits_while_a_workflow_step_runs_user_code(
    routed: str, kind: str, names: Callable[[str], str]
) -> None:
    alias = routed
    store = _queue(names("store"))
    gate = Gate()
    updater, selector, claim = _operation(kind, gate)

    def wf(step: Step) -> Any:
        if kind == "updater":
            result = yield from step.update(store, "s", updater, key="op")
            return result.state
        taken = yield from step.take(store, "s", selector, claim, key="op")
        return taken

    outcome = run_while_pushed(alias, names("wf"), wf, store, gate)

    assert outcome.kind == "completed", outcome
    snapshot = get_store_client(alias).get_store(store, "s")
    assert snapshot.version == 2  # the second writer's commit, then the step's
    if kind == "updater":
        assert decode_durable(outcome.result_json) == {"items": [1, 2], "n": 11}
        assert snapshot.state == {"items": [1, 2], "n": 11}
    else:
        assert decode_durable(outcome.result_json) == 1
        assert snapshot.state == {"items": [2], "n": 1}
    row = ExecutionStep.objects.get(execution_id="e1", step_key="op")
    assert row.status == "completed"
    assert AppliedStep.objects.filter(execution_id="e1", step_key="op").count() == 1


@pytest.mark.parametrize("use_functions", [None, False], ids=["default", "statements"])
@pytest.mark.parametrize("kind", ["updater", "selector", "claim"])
def test_a_second_writer_commits_while_the_client_runs_user_code(
    alias: str, kind: str, use_functions: bool | None, names: Callable[[str], str]
) -> None:
    from yieldstar_django.connector import DatabaseStoreClient

    store = _queue(names("store"))
    client = DatabaseStoreClient(alias, use_functions=use_functions)
    client.get_store(store, "s")
    gate = Gate()
    updater, selector, claim = _operation(kind, gate)
    writer = SecondWriter(alias, gate, _push(alias, store))
    writer.start()
    step_id = StoreStepId("e1", "op")
    if kind == "updater":
        result: Any = client.update_store(store, "s", updater=updater, step_id=step_id)
        assert result.state == {"items": [1, 2], "n": 11}
    else:
        result = client.take_from_store(store, "s", selector=selector, claim=claim, step_id=step_id)
        assert result.selected == 1
    writer.finish()
    assert result.version == 2
    assert client.get_store(store, "s").version == 2


def test_initial_and_schema_run_outside_any_transaction(
    alias: str, names: Callable[[str], str]
) -> None:
    gate = Gate()
    other = define_store(names("store"), None, initial=lambda id: {"n": 0})

    def initial(id: str) -> Any:
        gate()
        return {"n": 0}

    def schema(value: Any) -> Any:
        gate()
        return value

    store = define_store(names("store"), schema, initial=initial)
    client = get_store_client(alias)
    writer = SecondWriter(
        alias, gate, lambda: client.update_store(other, "s", updater=lambda d: d.update(n=1))
    )
    writer.start()
    result = client.update_store(store, "s", updater=lambda d: d.update(n=5))
    writer.finish()
    assert result.state == {"n": 5}
    assert client.get_store(other, "s").state == {"n": 1}


def test_a_lease_lost_while_the_updater_runs_records_neither_store_nor_heap(
    routed: str, names: Callable[[str], str]
) -> None:
    alias = routed
    store = _queue(names("store"))
    gate = Gate()
    updater, _, _ = _operation("updater", gate)

    def wf(step: Step) -> Any:
        result = yield from step.update(store, "s", updater, key="op")
        return result.version

    name = names("wf")
    workflow(name)(wf)
    get_store_client(alias).get_store(store, "s")
    outside.start(alias, name, "e1")

    def take_over() -> None:
        assert Execution.objects.filter(pk="e1").update(lease_owner="successor") == 1

    writer = SecondWriter(alias, gate, take_over)
    writer.start()
    with pytest.raises(LeaseLost):
        outside.run_once(alias, name, "e1")
    writer.finish()

    assert get_store_client(alias).get_store(store, "s").version == 0
    assert not AppliedStep.objects.filter(execution_id="e1").exists()
    assert not ExecutionStep.objects.filter(execution_id="e1").exists()


def test_a_process_killed_inside_the_step_commit_records_neither_then_once(
    routed: str, names: Callable[[str], str]
) -> None:
    alias = routed
    store_name, wf_name = names("store"), names("wf")
    outside.define_counter(store_name, wf_name)
    store = get_definition(store_name)
    assert store is not None
    get_store_client(alias).get_store(store, "s")
    outside.start(alias, wf_name, "e1")

    ctx: Any = _context()
    child: multiprocessing.process.BaseProcess = ctx.Process(
        target=outside.die_in_commit,
        args=(database_names(), alias, store_name, wf_name, "e1"),
        daemon=True,
    )
    child.start()
    child.join(WAIT * 4)
    assert child.exitcode == 17, "the child died inside the step's commit"

    assert get_store_client(alias).get_store(store, "s").version == 0
    assert not AppliedStep.objects.filter(execution_id="e1").exists()
    assert not ExecutionStep.objects.filter(execution_id="e1").exists()

    # The dead run's lease expires; the next run applies the step exactly once.
    Execution.objects.filter(pk="e1").update(lease_expires_at=timezone.now() - timedelta(1))
    outcome = outside.run_once(alias, wf_name, "e1")
    assert outcome.kind == "completed"
    assert decode_durable(outcome.result_json) == 1
    assert get_store_client(alias).get_store(store, "s").state == {"n": 1}
    assert AppliedStep.objects.filter(execution_id="e1").count() == 1
    assert ExecutionStep.objects.get(execution_id="e1", step_key="inc").status == "completed"


# --- the commit hook ----------------------------------------------------------------------


def _hook_store(names: Callable[[str], str]) -> StoreDefinition:
    return StoreDefinition(names("store"), None, lambda id: {"a": 0, "b": 0})


@pytest.mark.parametrize("use_functions", [None, False], ids=["default", "statements"])
def test_a_commit_hook_runs_in_the_commit_transaction_and_user_code_outside(
    alias: str, use_functions: bool | None, wakes: WakeCollector, names: Callable[[str], str]
) -> None:
    """The read, the updater and ``prepare`` run in autocommit; the commit (one function
    call on PostgreSQL, its ``unwait`` included) and the prepared work run in one
    transaction. ``unwait`` drops the caller's own waiter before the commit looks for
    waiters to wake, so only the other waiter is woken."""
    from yieldstar_django.connector import CommitHook, DatabaseStoreClient

    d = _hook_store(names)
    client = DatabaseStoreClient(alias, use_functions=use_functions)
    snap = client.get_store(d, "s")
    for execution in ("mine", "other"):
        client.register_waiter(
            StoreWaiter("wf", execution, "k", d.name, "s", snap.instance_id, 0, [("a",)])
        )
    connection = connections[alias]
    seen: list[tuple[str, bool]] = []
    in_updater: list[bool] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if not sql.startswith("BEGIN"):  # SQLite's, issued as the transaction opens
            seen.append((sql, connection.in_atomic_block))
        return execute(sql, params, many, context)

    def updater(state: Any) -> None:
        in_updater.append(connection.in_atomic_block)
        state["a"] = 1

    def prepare(mutation: Any) -> Callable[[], None]:
        assert not connection.in_atomic_block, "prepared before the transaction"
        assert mutation.encoded_result is not None

        def work() -> None:
            assert connection.in_atomic_block
            with connection.cursor() as cursor:
                cursor.execute("SELECT 'after hook'")

        return work

    hook = CommitHook(prepare, unwait=("k",))
    with connection.execute_wrapper(record), client.commit_hook(hook):
        result = client.update_store(d, "s", updater=updater, step_id=StoreStepId("mine", "k"))
    assert result.version == 1
    assert in_updater == [False]
    assert seen[0][1] is False, "the first read is in autocommit"
    end = seen.index(("SELECT 'after hook'", True))
    assert all(atomic for _, atomic in seen[1 : end + 1]), "one transaction from the commit"
    assert not any(atomic for _, atomic in seen[end + 1 :]), "wakes go out after the commit"
    if connection.vendor == "postgresql" and use_functions is None:
        calls = [s for s, _ in seen if "yieldstar_commit_mutation_v4" in s]
        assert len(calls) == 1, "still one function call for the commit"
        assert end == 2  # the read; then the call (which drops the waiter), the work
    assert [w.execution_id for w in wakes] == ["other"]
    assert [w.execution_id for w in client.waiters(d, "s")] == ["other"]


@pytest.mark.parametrize("use_functions", [None, False], ids=["default", "statements"])
def test_a_commit_hook_rolls_back_with_a_conflict_or_its_own_error(
    alias: str, use_functions: bool | None, wakes: WakeCollector, names: Callable[[str], str]
) -> None:
    """``unwait`` removes the waiter only with a committed mutation: a conflict (the core
    then retries, preparing the hook again) removes nothing, and an exception in the
    prepared work rolls the removal back; the exception reaches the caller with the store
    unchanged."""
    from yieldstar_django.connector import CommitHook, DatabaseStoreClient

    d = _hook_store(names)
    client = DatabaseStoreClient(alias, use_functions=use_functions)
    snap = client.get_store(d, "s")
    client.register_waiter(
        StoreWaiter("wf", "mine", "k", d.name, "s", snap.instance_id, 0, [("b",)])
    )
    prepared: list[int] = []
    in_work: list[int] = []
    other = threading.Event()

    def updater(state: Any) -> None:
        if not other.is_set():  # a concurrent commit makes this attempt conflict
            other.set()
            worker = threading.Thread(
                target=lambda: (
                    get_store_client(alias).update_store(d, "s", updater=lambda s: s.update(b=5)),
                    connections.close_all(),
                )
            )
            worker.start()
            join_or_fail(worker, what="the concurrent commit")
        state["a"] += 1

    def failing(mutation: Any) -> Callable[[], None]:
        prepared.append(len(client.waiters(d, "s")))

        def work() -> None:
            in_work.append(len(client.waiters(d, "s")))
            raise RuntimeError("the heap row could not be written")

        return work

    with client.commit_hook(CommitHook(failing, unwait=("k",))), pytest.raises(RuntimeError):
        client.update_store(d, "s", updater=updater, step_id=StoreStepId("mine", "k"))
    # Attempt 1 conflicted (nothing removed), attempt 2 removed the waiter, then its work
    # failed: rolled back, the waiter is back.
    assert prepared == [1, 1]
    assert in_work == [0]
    stored = client.get_store(d, "s")
    assert (stored.version, stored.state) == (1, {"a": 0, "b": 5})
    assert client.get_applied_step(d, "s", StoreStepId("mine", "k")) is None
    assert [w.execution_id for w in client.waiters(d, "s")] == ["mine"]
