"""The database client in one process: transactions, wakes, bad values, ordering, schema."""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connections, transaction
from django.test.utils import CaptureQueriesContext

from tests.connections import await_lock_wait, second_connection
from tests.polling import join_or_fail
from tests.shared.fixtures import POSTGRES, WakeCollector, configure, db
from yieldstar_django.connector import (
    DatabaseStoreClient,
    LeaseFence,
    LeaseNotHeld,
    get_store_client,
)
from yieldstar_django.core.commits import RetryPolicy, StoreMutation
from yieldstar_django.core.definition import StoreDefinition
from yieldstar_django.core.errors import (
    StoreStepMismatchError,
    StoreValidationError,
    WorkflowValueError,
)
from yieldstar_django.core.results import StoreStepId, StoreWaiter, Wake
from yieldstar_django.core.waiter_index import path_key, path_match, waiter_path_rows
from yieldstar_django.models import (
    AppliedStep,
    Execution,
    StoreInstance,
    StoreVersion,
    Waiter,
    WaiterPath,
    WakeIntent,
)
from yieldstar_django.wakes import enqueues_only

_names = itertools.count()


def jobs_store() -> StoreDefinition:
    return StoreDefinition(f"conn{next(_names)}", None, lambda id: {"jobs": [], "other": 0})


def first_job(state: Any) -> Any:
    return state["jobs"][0] if state["jobs"] else None


def job_awaited(alias: str) -> tuple[StoreDefinition, DatabaseStoreClient]:
    """A jobs store on ``alias``, a client, and execution ``e`` waiting for a job in it."""
    d = jobs_store()
    client = DatabaseStoreClient(alias)
    wait_for_job(client, d)
    return d, client


def wait_for_job(client: DatabaseStoreClient, d: StoreDefinition, execution: str = "e") -> None:
    result = client.take_from_store(d, "q", selector=first_job, claim=None)
    assert result.matched is False
    client.register_waiter(
        StoreWaiter(
            "wf",
            execution,
            "take",
            d.name,
            "q",
            result.instance_id,
            result.version,
            result.read_paths,
        )
    )


def intents(alias: str) -> list[tuple[str, str, bool]]:
    """(execution, reason, acknowledged) per intent: handing a wake over acknowledges
    nothing; only a run of the execution does."""
    return [
        (i.execution_id, i.reason, i.delivered_at is not None)
        for i in WakeIntent.objects.using(alias).order_by("id")
    ]


def row(alias: str, d: StoreDefinition, id: str = "q") -> tuple[int, str] | None:
    found = StoreInstance.objects.using(alias).filter(name=d.name, store_id=id).first()
    return None if found is None else (found.version, found.state)


def assert_connection_usable(alias: str) -> None:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)


# --- the index keys -----------------------------------------------------------------------


def test_path_keys_tell_str_and_int_apart_and_escape_everything() -> None:
    assert path_key(("a", 0)) != path_key(("a", "0"))
    assert path_key(()) == "[]"
    assert path_key(("\x00", "\ud800")).isascii()
    long = path_key(("x" * 1000,))
    assert long.startswith("#") and len(long) == 65
    assert path_key(("x" * 1000,)) == long != path_key(("x" * 999,))


def test_waiter_rows_and_path_matches_agree_with_prefix_intersection() -> None:
    rows = set(waiter_path_rows([("a", "b", 1)]))
    assert rows == {(0, '["a","b",1]'), (1, '["a"]'), (1, '["a","b"]')}
    assert waiter_path_rows([("a",)], same_instance=False) == [(2, "")]
    match = path_match([("a", "b")])
    assert match.wake_all is False
    assert set(match.read_keys) == {"[]", '["a"]', '["a","b"]'}
    assert match.prefix_keys == ['["a","b"]']
    assert path_match([("x",), ()]).wake_all is True

    def intersects(read: tuple[Any, ...], changed: tuple[Any, ...]) -> bool:
        m = path_match([changed])
        if m.wake_all:
            return True
        for kind, key in waiter_path_rows([read]):
            if (kind == 0 and key in m.read_keys) or (kind == 1 and key in m.prefix_keys):
                return True
        return False

    paths: list[tuple[Any, ...]] = [(), ("a",), ("a", 0), ("a", "0"), ("a", 0, "b"), ("b",)]
    for read in paths:
        for changed in paths:
            expected = read == changed[: len(read)] or changed == read[: len(changed)]
            assert intersects(read, changed) is expected, (read, changed)


# --- the client ---------------------------------------------------------------------------


@db("default", "sqlite")
def test_get_store_client_is_cached_per_alias() -> None:
    assert get_store_client() is get_store_client("default")
    assert get_store_client("sqlite") is not get_store_client()
    assert get_store_client("sqlite").using == "sqlite"


def test_limits_and_retry_policy_follow_settings(alias: str) -> None:
    client = DatabaseStoreClient(alias)
    with configure(
        CAS_MAX_ATTEMPTS=3,
        MAX_DEPTH=7,
        MAX_STATE_BYTES=4096,
        MAX_STATE_NODES=2000,
        CAS_BACKOFF_MAX=0.5,
    ):
        assert client.retry_policy().max_attempts == 3
        assert client.retry_policy().max_delay == 0.5
        assert client.durable_limits().max_depth == 7
        assert client.durable_limits().max_bytes == 4096
        assert client.durable_limits().max_nodes == 2000
    assert client.retry_policy().max_attempts == 50


def test_numbers_and_text_read_back_unchanged(alias: str) -> None:
    value = {"big": 1e20, "huge": 1e300, "int": 2**70, "neg": -0.0, "s": "é😀", "f": 0.1}
    d = StoreDefinition(f"num{next(_names)}", None, lambda id: value)
    client = DatabaseStoreClient(alias)
    state = client.get_store(d, "n").state
    assert state == value
    assert type(state["big"]) is float and type(state["int"]) is int
    assert math.copysign(1, state["neg"]) == -1


def test_update_records_versions_and_history_is_pruned(alias: str) -> None:
    d = jobs_store()
    client = DatabaseStoreClient(alias)
    with configure(VERSION_HISTORY_LIMIT=3, VERSION_HISTORY_KEEP_STATE=False):
        for n in range(5):
            client.update_store(d, "q", updater=lambda s, n=n: s.update(other=n))
    versions = StoreVersion.objects.using(alias).filter(store_name=d.name).order_by("version")
    assert [v.version for v in versions] == [3, 4, 5]
    assert all(v.state is None for v in versions)
    assert versions[0].paths == [("other",)]
    client.update_store(d, "q", updater=lambda s: s.update(other=9))
    latest = StoreVersion.objects.using(alias).get(store_name=d.name, version=6)
    assert latest.value == {"jobs": [], "other": 9}


def test_created_by_update_records_version_zero_and_one(alias: str) -> None:
    d = jobs_store()
    client = DatabaseStoreClient(alias)
    step = StoreStepId("x1", "s")
    result = client.update_store(d, "q", updater=lambda s: s.update(other=1), step_id=step)
    assert (result.previous_version, result.version) == (0, 1)
    versions = StoreVersion.objects.using(alias).filter(store_name=d.name).order_by("version")
    assert [(v.version, v.step_execution_id, v.step_key) for v in versions] == [
        (0, None, None),
        (1, "x1", "s"),
    ]
    assert versions[0].value == {"jobs": [], "other": 0}
    assert AppliedStep.objects.using(alias).get(store_name=d.name).execution_id == "x1"


def test_list_stores_is_in_code_point_order(alias: str) -> None:
    d = jobs_store()
    client = DatabaseStoreClient(alias)
    ids = ["b", "B", "a", "é", "😀", "z", "\uffff", "Z", "aa", "a b", "A", "_", "ä", "10", "9"]
    for id in ids:
        client.get_store(d, id)
    assert client.list_stores(d) == sorted(ids)


@pytest.mark.parametrize("alias", [POSTGRES], indirect=True)
def test_list_stores_ignores_a_linguistic_collation(alias: str) -> None:
    """Under an ICU collation ``"a" < "B"``; ``list_stores`` still sorts by code point."""
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_collation WHERE collname = 'en-x-icu'")
        if cursor.fetchone() is None:
            pytest.skip("needs the ICU collation en-x-icu in PostgreSQL")
    alter = "ALTER TABLE yieldstar_storeinstance ALTER COLUMN store_id TYPE varchar(255) COLLATE {}"
    with connections[alias].cursor() as cursor:
        cursor.execute(alter.format('"en-x-icu"'))
    try:
        d = jobs_store()
        client = DatabaseStoreClient(alias)
        for id in ["b", "B", "a", "A", "é", "😀", "z"]:
            client.get_store(d, id)
        with connections[alias].cursor() as cursor:
            cursor.execute(
                "SELECT store_id FROM yieldstar_storeinstance WHERE name = %s ORDER BY store_id",
                [d.name],
            )
            linguistic = [row[0] for row in cursor.fetchall()]
        assert linguistic != sorted(linguistic), "the collation really is linguistic"
        assert client.list_stores(d) == sorted(linguistic)
    finally:
        with connections[alias].cursor() as cursor:
            cursor.execute(alter.format("pg_catalog.default"))


def test_delete_store_keeps_the_ledger_and_history(alias: str) -> None:
    d = jobs_store()
    client = DatabaseStoreClient(alias)
    step = StoreStepId("x", "s")
    first = client.update_store(d, "q", updater=lambda s: s.update(other=1), step_id=step)
    client.delete_store(d, "q")
    client.delete_store(d, "q")  # a no-op
    assert row(alias, d) is None
    again = client.update_store(d, "q", updater=lambda s: s.update(other=2), step_id=step)
    assert again == first
    assert row(alias, d) is None, "a replay does not re-create the store"
    assert StoreVersion.objects.using(alias).filter(store_name=d.name).count() == 2


# --- wakes and transactions ---------------------------------------------------------------


def test_intersecting_change_wakes_once_and_disjoint_wakes_nobody(
    alias: str, wakes: WakeCollector
) -> None:
    d, client = job_awaited(alias)
    client.update_store(d, "q", updater=lambda s: s.update(other=1))
    assert wakes == []
    assert intents(alias) == []
    client.update_store(d, "q", updater=lambda s: s["jobs"].append("j"))
    assert wakes == [Wake("e", "wf")]
    assert intents(alias) == [("e", "store", False)]


def test_no_wake_before_the_outer_commit(alias: str, wakes: WakeCollector) -> None:
    d, client = job_awaited(alias)
    with transaction.atomic(using=alias):
        client.update_store(d, "q", updater=lambda s: s["jobs"].append("j"))
        with transaction.atomic(using=alias):
            client.update_store(d, "q", updater=lambda s: s["jobs"].append("k"))
        assert wakes == [], "nothing is delivered before the outermost commit"
        assert [(e, r, delivered) for e, r, delivered in intents(alias)] == [
            ("e", "store", False),
        ], "the second change finds the waiter woken by the first"
    assert wakes == [Wake("e", "wf")], "delivered after the commit"
    assert intents(alias) == [("e", "store", False)]


def test_a_rollback_wakes_nobody_and_changes_nothing(alias: str, wakes: WakeCollector) -> None:
    d, client = job_awaited(alias)
    before = row(alias, d)
    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        client.update_store(d, "q", updater=lambda s: s["jobs"].append("j"))
        raise RuntimeError("roll back")
    assert wakes == []
    assert intents(alias) == []
    assert row(alias, d) == before


def test_user_models_and_stores_commit_together(alias: str, wakes: WakeCollector) -> None:
    """A store write joins the caller's transaction: both or neither."""
    d = jobs_store()
    client = DatabaseStoreClient(alias)
    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        client.update_store(d, "q", updater=lambda s: s.update(other=1))
        WakeIntent.objects.using(alias).create(
            execution_id="mine",
            workflow_id="w",
            reason="test",
            available_at="2000-01-01T00:00:00Z",
            created_at="2000-01-01T00:00:00Z",
        )
        raise RuntimeError
    assert row(alias, d) is None
    assert not WakeIntent.objects.using(alias).exists()


@pytest.mark.parametrize("enqueue_only", [False, True], ids=["after", "during-commit"])
def test_a_failing_backend_never_fails_the_committed_write(
    alias: str, wakes: WakeCollector, enqueue_only: bool
) -> None:
    """Whether the wakes are handed over after the commit or, to a backend that only
    enqueues, during it (``PUBLISH_DURING_COMMIT``, PostgreSQL), a refusal is recorded on
    the intent once the commit stands."""
    d, client = job_awaited(alias)
    if enqueue_only:
        enqueues_only(wakes)
    wakes.fail = ConnectionError("broker down")
    result = client.update_store(d, "q", updater=lambda s: s["jobs"].append("j"))
    assert result.version == 1
    intent = WakeIntent.objects.using(alias).get()
    assert intent.delivered_at is None
    assert intent.attempts == 1
    assert "broker down" in intent.last_error
    assert_connection_usable(alias)


def test_stale_and_missing_registrations_are_woken_at_once(
    alias: str, wakes: WakeCollector
) -> None:
    d = jobs_store()
    client = DatabaseStoreClient(alias)
    result = client.take_from_store(d, "q", selector=first_job, claim=None)
    client.update_store(d, "q", updater=lambda s: s.update(other=1))
    client.register_waiter(
        StoreWaiter("wf", "stale", "k", d.name, "q", result.instance_id, 0, result.read_paths)
    )
    client.register_waiter(StoreWaiter("wf", "gone", "k", d.name, "nope", "i", 0, [("jobs",)]))
    assert wakes == [Wake("stale", "wf"), Wake("gone", "wf")]
    assert [w.execution_id for w in client.waiters(d, "q")] == ["stale"]
    assert [(e, r) for e, r, _ in intents(alias)] == [("stale", "stale"), ("gone", "missing")]


@pytest.mark.parametrize("use_functions", [True, False], ids=["function", "statements"])
def test_a_registration_unless_stale_registers_nothing_behind_a_change(
    alias: str, wakes: WakeCollector, use_functions: bool
) -> None:
    """A run that holds its lease registers ``unless_stale``: an observation the store
    moved past writes no waiter and no intent (the run looks again), a current one
    registers as always."""
    d = jobs_store()
    client = DatabaseStoreClient(alias, use_functions=use_functions)
    result = client.take_from_store(d, "q", selector=first_job, claim=None)
    client.update_store(d, "q", updater=lambda s: s.update(other=1))
    behind = StoreWaiter("wf", "e", "k", d.name, "q", result.instance_id, 0, result.read_paths)
    assert client.register_waiter(behind, unless_stale=True) is False
    assert (client.waiters(d, "q"), wakes, intents(alias)) == ([], [], [])
    current = client.take_from_store(d, "q", selector=first_job, claim=None)
    waiter = StoreWaiter(
        "wf", "e", "k", d.name, "q", current.instance_id, current.version, current.read_paths
    )
    assert client.register_waiter(waiter, unless_stale=True) is True
    assert [w.execution_id for w in client.waiters(d, "q")] == ["e"]
    assert client.register_waiter(behind) is True, "without it, registered and woken"
    assert wakes == [Wake("e", "wf")]


def test_reregistration_replaces_the_observation(alias: str, wakes: WakeCollector) -> None:
    d = StoreDefinition(f"rereg{next(_names)}", None, lambda id: {"a": 0, "b": 0})
    client = DatabaseStoreClient(alias)
    snap = client.get_store(d, "q")
    for paths in ([("a",)], [("b",)]):
        client.register_waiter(StoreWaiter("wf", "e", "k", d.name, "q", snap.instance_id, 0, paths))
    assert Waiter.objects.using(alias).count() == 1
    assert WaiterPath.objects.using(alias).count() == 1
    client.update_store(d, "q", updater=lambda s: s.update(a=1))
    assert wakes == []
    client.update_store(d, "q", updater=lambda s: s.update(b=1))
    assert wakes == [Wake("e", "wf")]
    client.remove_waiters("e")
    assert not WaiterPath.objects.using(alias).exists()
    assert not Waiter.objects.using(alias).exists()


# --- registrations fenced by a run's lease -----------------------------------------------

FINISHED = ("cancelled", "completed", "failed")


def leased(alias: str, owner: str, execution: str = "e", status: str = "waiting") -> None:
    """Execution ``execution`` on ``alias``, its lease held by ``owner``."""
    Execution.objects.using(alias).update_or_create(
        pk=execution,
        defaults={"workflow_id": "wf", "input_json": "{}", "lease_owner": owner, "status": status},
    )


@pytest.mark.parametrize("use_functions", [True, False], ids=["function", "statements"])
def test_a_fenced_registration_registers_only_while_the_run_holds_the_lease(
    alias: str, wakes: WakeCollector, use_functions: bool
) -> None:
    """A registration with a ``LeaseFence`` registers (and wakes, if stale) only while the
    execution is leased to that run and not finished; otherwise it raises ``LeaseNotHeld``
    and writes nothing: the waiter keeps its observation, and no intent is written (a stale
    observation would write one). Without a fence nothing is checked."""
    if alias == "sqlite" and not use_functions:
        pytest.skip("SQLite registers with the statements only")
    d = jobs_store()
    client = DatabaseStoreClient(alias, use_functions=use_functions)
    client.update_store(d, "q", updater=lambda s: s.update(other=1))
    snap = client.get_store(d, "q")
    current = StoreWaiter("wf", "e", "take", d.name, "q", snap.instance_id, 1, [("jobs",)])
    stale = StoreWaiter("wf", "e", "take", d.name, "q", snap.instance_id, 0, [("other",)])
    fence = LeaseFence("run-1", FINISHED)

    with pytest.raises(LeaseNotHeld):
        client.register_waiter(current, fence=fence)  # no such execution
    leased(alias, "run-1")
    client.register_waiter(current, fence=fence)
    assert [w.since_version for w in client.waiters(d, "q")] == [1]

    for owner, status in (("run-2", "running"), ("", "waiting"), ("run-1", "cancelled")):
        leased(alias, owner, status=status)  # taken over, released, cancelled
        with pytest.raises(LeaseNotHeld):
            client.register_waiter(stale, fence=fence)
        assert [w.since_version for w in client.waiters(d, "q")] == [1]
        assert Waiter.objects.using(alias).get().woken_at is None
    assert intents(alias) == [] and wakes == []
    assert_connection_usable(alias)

    client.register_waiter(stale)  # unfenced
    assert [w.since_version for w in client.waiters(d, "q")] == [0]
    assert wakes == [Wake("e", "wf")]


@contextmanager
def registering_behind(
    alias: str, client: DatabaseStoreClient, waiter: StoreWaiter, *statements: str
) -> Iterator[tuple[Any, list[BaseException | None]]]:
    """A transaction on a connection of its own runs ``statements`` and stays open while
    the run holding lease ``run-1`` registers ``waiter`` in a thread; yields (that
    connection, the registration's outcome) once the registration waits for one of the
    transaction's locks. On exit the transaction commits and the outcome is filled in."""
    outcome: list[BaseException | None] = []
    pid: list[int] = []

    def register() -> None:
        try:
            with connections[alias].cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                pid.append(cursor.fetchone()[0])
            client.register_waiter(waiter, fence=LeaseFence("run-1", FINISHED))
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)
        finally:
            connections.close_all()

    with (
        second_connection(alias, autocommit=False) as holder,
        second_connection(alias) as watcher,
    ):
        for statement in statements:
            holder.execute(statement)
        thread = threading.Thread(target=register)
        thread.start()
        try:
            await_lock_wait(pid, "the registration", watcher)
            yield holder, outcome
        finally:
            holder.commit()
            join_or_fail(thread, what="the registration")


@pytest.mark.parametrize("alias", [POSTGRES], indirect=True)
@pytest.mark.parametrize("use_functions", [True, False], ids=["function", "statements"])
def test_a_fenced_registration_waits_for_a_takeover_in_progress(
    alias: str, wakes: WakeCollector, use_functions: bool
) -> None:
    """The fence reads the execution's row under a share lock: a registration that meets
    a takeover not yet committed waits for it, then registers nothing (a plain read would
    have seen the lease still held, and registered a waiter the successor, whose
    acquisition had already read the waiters, would never see)."""
    d = jobs_store()
    client = DatabaseStoreClient(alias, use_functions=use_functions)
    snap = client.get_store(d, "q")
    waiter = StoreWaiter("wf", "e", "take", d.name, "q", snap.instance_id, 0, [("jobs",)])
    leased(alias, "run-1")
    takeover = "UPDATE yieldstar_execution SET lease_owner = 'run-2' WHERE id = 'e'"
    with registering_behind(alias, client, waiter, takeover) as (_, outcome):
        pass
    assert len(outcome) == 1 and isinstance(outcome[0], LeaseNotHeld), outcome
    assert client.waiters(d, "q") == []
    assert intents(alias) == [] and wakes == []


@pytest.mark.parametrize("alias", [POSTGRES], indirect=True)
@pytest.mark.parametrize("use_functions", [True, False], ids=["function", "statements"])
def test_a_fenced_registration_does_not_deadlock_a_cancel_then_store_write(
    alias: str, wakes: WakeCollector, use_functions: bool
) -> None:
    """A transaction that updates an execution's row (a cancel, say) and then writes a store
    the execution waits on, while the execution's run registers a waiter on that store: the
    registration locks the execution's row before the store's, the order of such a
    transaction, so it waits for the transaction instead of holding the store's row
    against it (a deadlock, one side aborted after ``deadlock_timeout``)."""
    d = jobs_store()
    client = DatabaseStoreClient(alias, use_functions=use_functions)
    snap = client.get_store(d, "q")
    waiter = StoreWaiter("wf", "e", "take", d.name, "q", snap.instance_id, 0, [("jobs",)])
    leased(alias, "run-1")
    cancel = "UPDATE yieldstar_execution SET status = 'cancelled' WHERE id = 'e'"
    with registering_behind(alias, client, waiter, "SET LOCAL lock_timeout = '5s'", cancel) as (
        canceller,
        outcome,
    ):
        canceller.execute(
            "UPDATE yieldstar_storeinstance SET version = version WHERE name = %s "
            "AND store_id = 'q'",
            [d.name],
        )
    assert len(outcome) == 1 and isinstance(outcome[0], LeaseNotHeld), outcome
    assert client.waiters(d, "q") == []


# --- bad values ---------------------------------------------------------------------------


def _deep(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


BAD_VALUES = {
    "nan": float("nan"),
    "infinity": float("inf"),
    "set": {1, 2},
    "nul": "a\x00b",
    "nul-key": {"a\x00": 1},
    "surrogate": "\ud800",
    "surrogate-key": {"\udfff": 1},
    "bytes": b"x",
    "int-key": {1: 2},
    "deep": _deep(300),
    "too-large": "x" * 5000,
}


@pytest.mark.parametrize("bad", list(BAD_VALUES))
def test_bad_values_are_rejected_with_store_and_connection_unchanged(
    alias: str, wakes: WakeCollector, bad: str
) -> None:
    d, client = job_awaited(alias)
    before = row(alias, d)
    value = BAD_VALUES[bad]
    with configure(WAKE_BACKEND=wakes, MAX_STATE_BYTES=4096):
        with pytest.raises((WorkflowValueError, StoreValidationError)):
            client.update_store(d, "q", updater=lambda s: s["jobs"].append(value))
        with pytest.raises((WorkflowValueError, StoreValidationError)):
            client.update_store(d, "q", updater=lambda s: {"jobs": [value]})
        with pytest.raises((WorkflowValueError, StoreValidationError)):
            client.take_from_store(
                d, "q", selector=lambda s: True, claim=lambda draft, _: draft.update(x=value)
            )
        # inside a transaction of the caller, which stays usable
        with transaction.atomic(using=alias):
            with pytest.raises((WorkflowValueError, StoreValidationError)):
                client.update_store(d, "q", updater=lambda s: s.update(other=value))
            assert_connection_usable(alias)
            client.update_store(d, "q", updater=lambda s: s.update(other=1))
    assert row(alias, d) == (1, '{"jobs":[],"other":1}')
    assert before == (0, '{"jobs":[],"other":0}')
    assert wakes == [], "a rejected write wakes nobody (and the good one is disjoint)"
    assert_connection_usable(alias)


@pytest.mark.parametrize(
    "store_id", ["a\x00b", "\ud800", "x" * 256], ids=["nul", "surrogate", "too-long"]
)
def test_unstorable_ids_never_reach_sql(alias: str, store_id: str) -> None:
    d = jobs_store()
    client = DatabaseStoreClient(alias)
    with transaction.atomic(using=alias):
        with pytest.raises(ValueError):
            client.get_store(d, store_id)
        with pytest.raises(ValueError):
            client.update_store(d, store_id, updater=lambda s: None)
        with pytest.raises(ValueError):
            client.register_waiter(StoreWaiter("wf", "e", "k", d.name, store_id, "i", 0, []))
        with pytest.raises(ValueError):
            client.update_store(d, "ok", updater=lambda s: None, step_id=StoreStepId("e", "k\x00"))
        assert_connection_usable(alias)
    assert not StoreInstance.objects.using(alias).filter(name=d.name).exists()


# --- round trips --------------------------------------------------------------------------


@pytest.mark.parametrize("alias", [POSTGRES], indirect=True)
def test_an_uncontended_write_is_one_statement_on_postgres(
    alias: str, wakes: WakeCollector
) -> None:
    """A store the client has seen commits from the row it remembers: one function call
    for an update, a take or a conditional delete. With a step id the ledger and the row are
    read first, in one statement (a replay must not run user code). Instrumentation
    (``CaptureQueriesContext``, ``execute_wrapper``) sees every statement."""
    d = jobs_store()
    client = DatabaseStoreClient(alias)
    client.get_store(d, "q")
    with CaptureQueriesContext(connections[alias]) as queries:
        client.update_store(d, "q", updater=lambda s: s.update(other=1))
    assert len(queries) == 1
    assert "yieldstar_commit_mutation_v4" in queries[0]["sql"]

    seen: list[str] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append(sql)
        return execute(sql, params, many, context)

    with connections[alias].execute_wrapper(record):
        client.update_store(
            d, "q", updater=lambda s: s.update(other=2), step_id=StoreStepId("e", "k")
        )
        client.update_store(d, "q", updater=lambda s: s["jobs"].append({"id": 1}))
        taken = client.take_from_store(
            d, "q", selector=lambda s: s["jobs"][0] if s["jobs"] else None, claim=_pop_first
        )
        snap = client.get_store(d, "q")
        client.delete_store_from(d, "q", snapshot=snap)
    assert taken.matched
    assert [_which(sql) for sql in seen] == [
        "ledger and row",
        "commit_mutation_v4",
        "commit_mutation_v4",
        "commit_mutation_v4",
        "storeinstance",
        "commit_mutation_v4",
    ]


def test_rows_of_an_open_transaction_are_not_remembered(alias: str, wakes: WakeCollector) -> None:
    """A row committed or read inside ``atomic`` may be rolled back; remembering it would
    let a later write commit over another writer's state of the same version number."""
    d = jobs_store()
    client = DatabaseStoreClient(alias)
    client.get_store(d, "q")
    before = client.snapshots.get(d.name, "q")
    assert before is not None and before.version == 0
    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        client.update_store(d, "q", updater=lambda s: s.update(other=1))
        client.get_store(d, "q")
        assert client.snapshots.get(d.name, "q") == before
        raise RuntimeError("roll back")
    DatabaseStoreClient(alias).update_store(d, "q", updater=lambda s: s.update(other=2))
    result = client.update_store(d, "q", updater=lambda s: s.update(other=s["other"] + 10))
    assert result.state["other"] == 12
    assert (result.previous_version, result.version) == (1, 2)


@pytest.mark.parametrize("alias", [POSTGRES], indirect=True)
def test_rows_of_a_manual_transaction_are_not_remembered(alias: str, wakes: WakeCollector) -> None:
    """With autocommit off (``set_autocommit(False)``, ``AUTOCOMMIT: False``) the
    connection is in a transaction outside any ``atomic`` block: a row committed or read
    there may be rolled back as well. (PostgreSQL: on SQLite Django cannot nest ``atomic``
    in a manual transaction, whose savepoint commits it.)"""
    d = jobs_store()
    client = DatabaseStoreClient(alias)
    client.get_store(d, "q")
    transaction.set_autocommit(False, using=alias)
    try:
        client.update_store(d, "q", updater=lambda s: s.update(other=1))
        client.get_store(d, "q")
        transaction.rollback(using=alias)
    finally:
        transaction.set_autocommit(True, using=alias)
    DatabaseStoreClient(alias).update_store(d, "q", updater=lambda s: s.update(other=2))
    result = client.update_store(d, "q", updater=lambda s: s.update(other=s["other"] + 10))
    assert result.state["other"] == 12, "computed from the state another writer committed"
    assert (result.previous_version, result.version) == (1, 2)


def _lose_once(alias: str, client: DatabaseStoreClient, d: StoreDefinition) -> None:
    """Another writer commits; ``client`` still remembers the row before it."""
    old = client.snapshots.get(d.name, "q")
    assert old is not None
    DatabaseStoreClient(alias).update_store(d, "q", updater=lambda s: s.update(other=1))
    client.snapshots.forget(d.name, "q")
    client.snapshots.put(d.name, "q", old)


def _row_locked(queries: CaptureQueriesContext) -> bool:
    return any("FOR NO KEY UPDATE" in q["sql"] for q in queries.captured_queries)


@pytest.mark.parametrize("alias", [POSTGRES], indirect=True)
def test_a_write_that_lost_queues_on_the_row(alias: str, wakes: WakeCollector) -> None:
    """After ``queue_after`` lost races the next attempt runs in a transaction that locks
    the row first; an error in it rolls that transaction back."""
    d = jobs_store()
    client = DatabaseStoreClient(alias, retry=RetryPolicy(queue_after=1))
    client.get_store(d, "q")
    _lose_once(alias, client, d)
    with CaptureQueriesContext(connections[alias]) as queries:
        result = client.update_store(d, "q", updater=lambda s: s.update(other=s["other"] + 10))
    assert result.state["other"] == 11
    assert _row_locked(queries)

    _lose_once(alias, client, d)
    calls: list[int] = []

    def fails_in_the_queue(state: Any) -> None:
        calls.append(state["other"])
        if len(calls) == 2:
            raise RuntimeError("updater failed")

    with pytest.raises(RuntimeError):
        client.update_store(d, "q", updater=fails_in_the_queue)
    assert len(calls) == 2, "tried on the remembered row, then under the lock"
    assert not connections[alias].in_atomic_block
    assert DatabaseStoreClient(alias).get_store(d, "q").state["other"] == 1


@pytest.mark.parametrize("alias", [POSTGRES], indirect=True)
def test_a_write_inside_a_transaction_never_queues(alias: str, wakes: WakeCollector) -> None:
    """The row lock would outlive the attempt, held until the caller's transaction ends."""
    d = jobs_store()
    client = DatabaseStoreClient(alias, retry=RetryPolicy(queue_after=1))
    client.get_store(d, "q")
    _lose_once(alias, client, d)
    with transaction.atomic(using=alias), CaptureQueriesContext(connections[alias]) as queries:
        result = client.update_store(d, "q", updater=lambda s: s.update(other=s["other"] + 10))
    assert result.state["other"] == 11
    assert not _row_locked(queries)


@pytest.mark.parametrize("alias", [POSTGRES], indirect=True)
def test_a_write_in_a_manual_transaction_never_queues(alias: str, wakes: WakeCollector) -> None:
    """With autocommit off the row lock would outlive the attempt as well."""
    d = jobs_store()
    client = DatabaseStoreClient(alias, retry=RetryPolicy(queue_after=1))
    client.get_store(d, "q")
    _lose_once(alias, client, d)
    transaction.set_autocommit(False, using=alias)
    try:
        with CaptureQueriesContext(connections[alias]) as queries:
            result = client.update_store(d, "q", updater=lambda s: s.update(other=s["other"] + 10))
        transaction.commit(using=alias)
    finally:
        transaction.set_autocommit(True, using=alias)
    assert result.state["other"] == 11
    assert not _row_locked(queries)


def _pop_first(draft: Any, selected: Any) -> None:
    draft["jobs"].pop(0)


def _which(sql: str) -> str:
    if "yieldstar_appliedstep" in sql and "yieldstar_storeinstance" in sql:
        return "ledger and row"
    for name in ("commit_mutation_v4", "storeinstance"):
        if name in sql:
            return name
    return sql


@pytest.mark.parametrize("alias", [POSTGRES], indirect=True)
def test_without_the_snapshot_cache_an_update_reads_first(
    alias: str, wakes: WakeCollector, settings: Any
) -> None:
    """``SNAPSHOT_CACHE_SIZE = 0``: a read and one function call, with or without a step
    id (the ledger lookup rides on the read)."""
    settings.YIELDSTAR = {**getattr(settings, "YIELDSTAR", {}), "SNAPSHOT_CACHE_SIZE": 0}
    d = jobs_store()
    client = DatabaseStoreClient(alias)
    client.get_store(d, "q")
    with CaptureQueriesContext(connections[alias]) as queries:
        client.update_store(d, "q", updater=lambda s: s.update(other=1))
        client.update_store(
            d, "q", updater=lambda s: s.update(other=2), step_id=StoreStepId("e", "k")
        )
    assert len(queries) == 4
    assert "yieldstar_appliedstep" in queries[2]["sql"]
    assert "yieldstar_storeinstance" in queries[2]["sql"]
    assert "yieldstar_commit_mutation_v4" in queries[3]["sql"]


def test_waiters_join_the_callers_transaction_without_a_savepoint(
    alias: str, wakes: WakeCollector
) -> None:
    """``register_waiter``/``remove_waiters`` inside an ``atomic`` add no savepoint, and
    still commit or roll back with the caller's transaction."""
    d = jobs_store()
    client = DatabaseStoreClient(alias)
    snap = client.get_store(d, "q")
    waiter = StoreWaiter("wf", "e", "take", d.name, "q", snap.instance_id, 0, [("jobs", 0)])
    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        with CaptureQueriesContext(connections[alias]) as queries:
            client.register_waiter(waiter)
        assert Waiter.objects.using(alias).count() == 1
        raise RuntimeError("roll back")
    assert not any("SAVEPOINT" in q["sql"].upper() for q in queries), queries.captured_queries
    assert not Waiter.objects.using(alias).exists(), "rolled back with the caller"
    assert not WaiterPath.objects.using(alias).exists()

    client.register_waiter(waiter)  # in autocommit: its own transaction
    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        with CaptureQueriesContext(connections[alias]) as queries:
            client.remove_waiters("e", "take")
        assert not Waiter.objects.using(alias).exists()
        raise RuntimeError("roll back")
    assert not any("SAVEPOINT" in q["sql"].upper() for q in queries), queries.captured_queries
    assert Waiter.objects.using(alias).count() == 1, "the removal rolled back with the caller"
    with transaction.atomic(using=alias):
        client.remove_waiters("e")
    assert not Waiter.objects.using(alias).exists()
    assert not WaiterPath.objects.using(alias).exists()
    assert wakes == []


def test_read_store_and_step_is_both_lookups_at_once(alias: str) -> None:
    d = jobs_store()
    client = DatabaseStoreClient(alias)
    step = StoreStepId("e", "k")
    assert client.read_store_and_step(d, "q", step) == (None, None)
    snap = client.get_store(d, "q")
    assert client.read_store_and_step(d, "q", step) == (None, client.read_store(d, "q"))
    client.update_store(d, "q", updater=lambda s: s.update(other=1), step_id=step)
    recorded = client.get_applied_step(d, "q", step)
    assert recorded is not None
    stored = client.read_store(d, "q")
    assert stored is not None and stored.version == snap.version + 1
    assert client.read_store_and_step(d, "q", step) == (recorded, stored)
    assert client.read_store_and_step(d, "q", StoreStepId("e", "other")) == (None, stored)
    client.delete_store(d, "q")
    assert client.read_store_and_step(d, "q", step) == (recorded, None), "the ledger stays"
    with CaptureQueriesContext(connections[alias]) as queries:
        client.read_store_and_step(d, "q", step)
    assert len(queries) == 1
    with pytest.raises(ValueError):
        client.read_store_and_step(d, "q", StoreStepId("e", "k\x00"))


def test_the_ledger_records_each_operation_kind(alias: str) -> None:
    """Every commit path writes ``AppliedStep.operation`` (the PL/pgSQL functions on
    PostgreSQL, the statements on SQLite)."""
    d = jobs_store()
    client = DatabaseStoreClient(alias)
    client.update_store(
        d, "k", updater=lambda s: s["jobs"].append(1), step_id=StoreStepId("e", "u")
    )
    client.take_from_store(
        d,
        "k",
        selector=first_job,
        claim=lambda s, _: s["jobs"].pop(),
        step_id=StoreStepId("e", "t"),
    )
    snap = client.get_store(d, "k")
    client.delete_store_from(d, "k", snapshot=snap, step_id=StoreStepId("e", "d"))
    rows = AppliedStep.objects.using(alias).filter(store_name=d.name).order_by("step_key")
    assert [(r.step_key, r.operation) for r in rows] == [
        ("d", "delete"),
        ("t", "take"),
        ("u", "update"),
    ]


def test_a_ledger_row_older_than_the_operation_column_still_replays(alias: str) -> None:
    """An empty ``operation`` (a row recorded before migration 0007) is accepted by the
    commit paths; its result text still names its kind, so a replay by another kind raises
    all the same and one by its own kind returns the recorded result."""
    d = jobs_store()
    client = DatabaseStoreClient(alias)
    step = StoreStepId("e", "old")
    first = client.update_store(d, "k", updater=lambda s: s.update(other=5), step_id=step)
    AppliedStep.objects.using(alias).filter(store_name=d.name).update(operation="")
    current = client.read_store(d, "k")
    assert current is not None
    take = StoreMutation(
        d, "k", current, False, current.encoded, [], step,
        '{"instance_id":"i","kind":"take","selected":1,"version":1}', "take",
    )  # fmt: skip
    outcome = client.commit_mutation(take)
    assert outcome.status == "already-applied"
    assert client.update_store(d, "k", updater=lambda s: None, step_id=step) == first
    with pytest.raises(StoreStepMismatchError):
        client.take_from_store(d, "k", selector=first_job, claim=None, step_id=step)
    assert client.read_store(d, "k") == current
