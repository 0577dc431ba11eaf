"""Wakes published while their commit is acknowledged (``PUBLISH_DURING_COMMIT``,
:mod:`yieldstar_django.connector.overlap`): when it applies, what the backend sees, and why
a wake that outruns its commit loses nothing (a second connection racing it)."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from django.db import DataError, IntegrityError, connections, transaction
from psycopg import pq

from tests.connections import DIRECT, second_connection
from tests.polling import join_or_fail, wait_until
from tests.shared.fixtures import POSTGRES, configure
from yieldstar_django.connector import DatabaseStoreClient, overlap
from yieldstar_django.core.definition import StoreDefinition
from yieldstar_django.core.results import StoreTakeUnmatched, StoreWaiter, Wake
from yieldstar_django.models import StoreInstance, WakeIntent
from yieldstar_django.sql import queries
from yieldstar_django.wakes import enqueues_only

pytestmark = pytest.mark.parametrize("alias", [POSTGRES], indirect=True)

_names = itertools.count()


class Published(list[tuple[Wake, str]]):
    """An ``enqueues_only`` backend: each wake with the committing connection's status
    when it was published (``ACTIVE``: its commit was still in flight)."""

    fail: BaseException | None = None

    def __init__(self, alias: str, *, marked: bool = True) -> None:
        super().__init__()
        self.alias = alias
        if marked:
            enqueues_only(self)

    def __call__(self, wakes: Sequence[Wake]) -> None:
        status = connections[self.alias].connection.pgconn.transaction_status
        self.extend((w, pq.TransactionStatus(status).name) for w in wakes)
        if self.fail is not None:
            raise self.fail


@pytest.fixture
def published(alias: str) -> Iterator[Published]:
    backend = Published(alias)
    with configure(WAKE_BACKEND=backend):
        yield backend


def awaited(alias: str, execution: str = "e") -> tuple[StoreDefinition, DatabaseStoreClient]:
    """A jobs store with ``execution`` waiting for a job in it."""
    d = StoreDefinition(f"pub{next(_names)}", None, lambda id: {"jobs": []})
    client = DatabaseStoreClient(alias)
    register(client, d, execution)
    return d, client


def first_job(state: Any) -> Any:
    return state["jobs"][0] if state["jobs"] else None


def register(client: DatabaseStoreClient, d: StoreDefinition, execution: str) -> Any:
    """Take nothing from ``d``, then wait for a job: what a run of a taker does."""
    result = client.take_from_store(d, "q", selector=first_job, claim=None)
    if isinstance(result, StoreTakeUnmatched):
        client.register_waiter(
            StoreWaiter(
                "wf", execution, "k", d.name, "q", result.instance_id, result.version,
                result.read_paths,
            )
        )  # fmt: skip
    return result


def idle(alias: str) -> bool:
    connection = connections[alias]
    status = connection.connection.pgconn.transaction_status
    return status == pq.TransactionStatus.IDLE and not connection.in_atomic_block


def test_wakes_are_published_while_the_commit_is_acknowledged(
    alias: str, published: Published
) -> None:
    d, client = awaited(alias)
    result = client.update_store(d, "q", updater=lambda s: s["jobs"].append("j"))
    assert published == [(Wake("e", "wf"), "ACTIVE")], "published with the COMMIT in flight"
    assert result.version == 1
    assert StoreInstance.objects.using(alias).get(name=d.name).value == {"jobs": ["j"]}
    intent = WakeIntent.objects.using(alias).get()
    assert (intent.execution_id, intent.attempts, intent.delivered_at) == ("e", 0, None)
    assert idle(alias), "no transaction left open"
    assert client.get_store(d, "q").version == 1, "the connection goes on"


def test_a_deletion_publishes_during_its_commit(alias: str, published: Published) -> None:
    d, client = awaited(alias)
    client.delete_store(d, "q")
    assert published == [(Wake("e", "wf"), "ACTIVE")]
    assert not StoreInstance.objects.using(alias).filter(name=d.name).exists()
    assert idle(alias)


def test_a_commit_that_does_not_commit_publishes_nothing(alias: str, published: Published) -> None:
    d, client = awaited(alias)
    other = DatabaseStoreClient(alias)
    client.get_store(d, "q")  # remembered at version 0
    with configure(WAKE_BACKEND=lambda wakes: None):
        other.update_store(d, "q", updater=lambda s: s["jobs"].append("x"))  # wakes "e"
    result = client.update_store(d, "q", updater=lambda s: s["jobs"].append("j"))
    assert result.version == 2, "the optimistic commit conflicted, the retry committed"
    assert published == [], "the conflict published nothing; e was already woken"
    assert idle(alias)


def test_a_failing_call_rolls_back_and_publishes_nothing(
    alias: str, published: Published, monkeypatch: pytest.MonkeyPatch
) -> None:
    d, client = awaited(alias)
    statements = queries.of(connections[alias])
    parameters = statements.commit_call.count("%s")
    failing = "SELECT 1 / 0 WHERE " + " OR ".join(["(%s)::text IS NULL"] * parameters)
    monkeypatch.setattr(statements, "commit_call", failing)
    with pytest.raises(DataError):
        client.delete_store(d, "q")
    assert published == []
    assert idle(alias), "rolled back"
    monkeypatch.undo()
    assert client.update_store(d, "q", updater=lambda s: s["jobs"].append("j")).version == 1
    assert published == [(Wake("e", "wf"), "ACTIVE")]


@DIRECT
def test_a_connection_cut_once_the_commit_answered_does_not_fail_the_write(
    alias: str,
) -> None:
    """The server answers the commit and is then terminated (the fault suite's cut
    connections): the write committed, so the call returns it; it must not raise, or its
    caller would make the change a second time."""
    d, client = awaited(alias)
    pid = connections[alias].connection.info.backend_pid

    def cut(wakes: Sequence[Wake]) -> None:
        with second_connection(alias) as admin:
            wait_until(
                "the commit to be visible",
                lambda: (
                    admin.execute(
                        "SELECT version FROM yieldstar_storeinstance WHERE name = %s", [d.name]
                    ).fetchone()
                    == (1,)
                ),
            )
            time.sleep(0.05)  # its reply sent
            admin.execute("SELECT pg_terminate_backend(%s)", [pid])
            wait_until(
                "the backend to be gone",
                lambda: (
                    not admin.execute(
                        "SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]
                    ).fetchone()
                ),
            )

    with configure(WAKE_BACKEND=enqueues_only(cut)):
        result = client.update_store(d, "q", updater=lambda s: s["jobs"].append("j"))
    assert result.version == 1
    connections[alias].close()  # what Django does with a broken connection at request end
    assert StoreInstance.objects.using(alias).get(name=d.name).value == {"jobs": ["j"]}


def test_inside_atomic_wakes_wait_for_the_outer_commit(alias: str, published: Published) -> None:
    d, client = awaited(alias)
    with transaction.atomic(using=alias):
        client.update_store(d, "q", updater=lambda s: s["jobs"].append("j"))
        assert published == []
    assert published == [(Wake("e", "wf"), "IDLE")], "on commit, as always"


@pytest.mark.parametrize("how", ["setting off", "plain backend"])
def test_otherwise_wakes_are_published_after_the_commit(
    alias: str, published: Published, how: str
) -> None:
    d, client = awaited(alias)
    if how == "setting off":
        backend, settings = published, configure(PUBLISH_DURING_COMMIT=False)
    else:
        backend = Published(alias, marked=False)
        settings = configure(WAKE_BACKEND=backend)
    with settings:
        client.update_store(d, "q", updater=lambda s: s["jobs"].append("j"))
    assert backend == [(Wake("e", "wf"), "IDLE")]


# --- a woken run that outruns the commit --------------------------------------------------


@pytest.fixture
def slow_commits(alias: str) -> Iterator[str]:
    """Commits that write a version of the returned store name wait 0.5 s in a deferred
    trigger, after the call returned: a wide window between publish and visibility."""
    name = f"slow{next(_names)}"
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION ys_test_slow_commit() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN PERFORM pg_sleep(0.5); RETURN NULL; END $$"
        )
        cursor.execute(
            "CREATE CONSTRAINT TRIGGER ys_test_slow AFTER INSERT ON yieldstar_storeversion "
            "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW "
            f"WHEN (NEW.store_name = '{name}') EXECUTE FUNCTION ys_test_slow_commit()"
        )
    try:
        yield name
    finally:
        with connections[alias].cursor() as cursor:
            cursor.execute("DROP TRIGGER ys_test_slow ON yieldstar_storeversion")
            cursor.execute("DROP FUNCTION ys_test_slow_commit()")


class EarlyRun:
    """An ``enqueues_only`` backend that runs a woken taker at once, on another connection
    (a thread), and waits for it: the worst case of a message that outruns its commit."""

    def __init__(self, alias: str, d: StoreDefinition, execution: str) -> None:
        self.alias, self.d, self.execution = alias, d, execution
        self.results: list[Any] = []
        self.calls = 0
        enqueues_only(self)

    def __call__(self, wakes: Sequence[Wake]) -> None:
        self.calls += 1
        if self.calls > 1:
            return  # the wake its own registration sent, from the thread

        def run() -> None:
            try:
                client = DatabaseStoreClient(self.alias)
                self.results.append(register(client, self.d, self.execution))
            finally:
                connections.close_all()

        thread = threading.Thread(target=run)
        thread.start()
        join_or_fail(thread, what="the thread")


def test_a_run_that_reads_before_the_commit_is_visible_is_woken_again(
    alias: str, slow_commits: str
) -> None:
    d = StoreDefinition(slow_commits, None, lambda id: {"jobs": []})
    client = DatabaseStoreClient(alias)
    register(client, d, "early")
    early = EarlyRun(alias, d, "early")
    with configure(WAKE_BACKEND=early):
        client.update_store(d, "q", updater=lambda s: s["jobs"].append("j"))
    (seen,) = early.results
    assert isinstance(seen, StoreTakeUnmatched) and seen.version == 0, (
        "the run read the store before the commit was visible"
    )
    reasons = list(
        WakeIntent.objects.using(alias)
        .filter(execution_id="early")
        .order_by("id")
        .values_list("reason", flat=True)
    )
    assert reasons == ["store", "stale"], (
        "its registration waited for the commit, saw the version move and woke it again"
    )


def test_a_take_computed_before_the_commit_is_visible_takes_once(
    alias: str, slow_commits: str
) -> None:
    d = StoreDefinition(slow_commits, None, lambda id: {"jobs": []})
    client = DatabaseStoreClient(alias)
    with configure(WAKE_BACKEND=lambda wakes: None):
        client.update_store(d, "q", updater=lambda s: s["jobs"].append("a"))
        waiting = client.take_from_store(
            d, "q", selector=lambda s: "b" in s["jobs"] or None, claim=None
        )  # a taker of "b", so that pushing it wakes someone
        client.register_waiter(
            StoreWaiter("wf", "waiting", "k", d.name, "q", waiting.instance_id, 1, [("jobs",)])
        )
    early = DatabaseStoreClient(alias)
    taken: list[Any] = []

    def take_early(wakes: Sequence[Wake]) -> None:
        def run() -> None:
            try:
                taken.append(
                    early.take_from_store(
                        d, "q", selector=first_job, claim=lambda s, job: s["jobs"].remove(job)
                    )
                )
            finally:
                connections.close_all()

        if not taken:
            thread = threading.Thread(target=run)
            thread.start()
            join_or_fail(thread, what="the thread")

    with configure(WAKE_BACKEND=enqueues_only(take_early)):
        client.update_store(d, "q", updater=lambda s: s["jobs"].append("b"))
    (take,) = taken
    assert early.commit_attempts == 2, "its first commit compared the version before 'b'"
    assert (take.selected, take.version) == ("a", 3), "computed again, taken once"
    assert StoreInstance.objects.using(alias).get(name=d.name).value == {"jobs": ["b"]}


def test_a_batch_that_cannot_be_left_closes_its_connection(
    alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After an error, if what the batch still holds does not come, the connection is
    closed: its next use fails at once instead of waiting for results in pipeline mode."""
    connections[alias].ensure_connection()
    raw = connections[alias].connection
    pgconn = raw.pgconn
    pgconn.enter_pipeline_mode()
    pgconn.send_query_params(b"SELECT pg_sleep(0.5)", None)
    pgconn.send_flush_request()  # no sync: the query runs, nothing ends the batch
    while pgconn.flush():
        pass
    monkeypatch.setattr(overlap, "LEAVE_TIMEOUT", 0.05)
    overlap._leave_pipeline(pgconn)
    assert raw.closed
    connections[alias].close()
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT 1")  # a new connection
        wait_until(
            "the closed session's backend to end",
            lambda: (
                not cursor.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(0.5)'"
                ).fetchone()
            ),
        )


@pytest.fixture
def prepares(alias: str) -> Iterator[Any]:
    """The connection with psycopg's ``prepare_threshold`` set (``OPTIONS``; 0: at once)."""
    connections[alias].ensure_connection()
    raw = connections[alias].connection
    previous = raw.prepare_threshold
    raw.prepare_threshold = 0
    try:
        yield raw
    finally:
        raw.prepare_threshold = previous


def overlap_statements(alias: str) -> list[str]:
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT name FROM pg_prepared_statements WHERE name LIKE '_yieldstar_overlap_%%'"
        )
        return [name for (name,) in cursor.fetchall()]


def test_the_call_is_prepared_once_where_the_connection_prepares(
    alias: str, published: Published, prepares: Any
) -> None:
    d, client = awaited(alias)
    for n in range(3):
        client.update_store(d, "q", updater=lambda s, n=n: s["jobs"].append(n))
    assert published == [(Wake("e", "wf"), "ACTIVE")], "still published during the commit"
    (name,) = overlap_statements(alias)  # the same statement each time: prepared once
    assert client.get_store(d, "q").state == {"jobs": [0, 1, 2]}
    assert idle(alias)
    prepares.prepare_threshold = None
    client.update_store(d, "q", updater=lambda s: s["jobs"].append(3))
    assert overlap_statements(alias) == [name], "unprepared on a connection that does not ask"


@DIRECT
def test_a_deallocated_call_is_prepared_again(
    alias: str, published: Published, prepares: Any
) -> None:
    """psycopg sends ``DEALLOCATE ALL`` when it drops its own prepared statements (after a
    ``ROLLBACK``, say): the next commit finds its statement gone, and prepares it again
    without running twice."""
    d, client = awaited(alias)
    client.update_store(d, "q", updater=lambda s: s["jobs"].append("a"))
    assert overlap_statements(alias)
    with connections[alias].cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")
    assert overlap_statements(alias) == []
    result = client.update_store(d, "q", updater=lambda s: s["jobs"].append("b"))
    assert result.version == 2, "committed once"
    assert client.get_store(d, "q").state == {"jobs": ["a", "b"]}
    assert len(overlap_statements(alias)) == 1
    assert idle(alias)


@DIRECT
def test_a_call_that_fails_leaves_its_statement_prepared(
    alias: str, published: Published, prepares: Any
) -> None:
    """An error of the call (not of its preparation) keeps the statement: the next commit
    runs it without preparing again."""
    d, client = awaited(alias)
    client.update_store(d, "q", updater=lambda s: s["jobs"].append("a"))
    (name,) = overlap_statements(alias)
    # The next commit of this store fails (the DDL from another connection: psycopg would
    # answer DDL on this one with a DEALLOCATE ALL).
    with second_connection(alias) as admin:
        admin.execute(
            "ALTER TABLE yieldstar_storeinstance ADD CONSTRAINT ys_test_small "
            "CHECK (version < 2) NOT VALID"
        )
        try:
            with pytest.raises(IntegrityError, match="ys_test_small"):
                client.update_store(d, "q", updater=lambda s: s["jobs"].append("b"))
        finally:
            admin.execute("ALTER TABLE yieldstar_storeinstance DROP CONSTRAINT ys_test_small")
    assert idle(alias), "rolled back"
    assert overlap_statements(alias) == [name]
    assert client.update_store(d, "q", updater=lambda s: s["jobs"].append("c")).version == 2
    assert overlap_statements(alias) == [name], "not prepared again"


def test_a_commit_in_a_manual_transaction_is_the_callers_to_roll_back(
    alias: str, published: Published
) -> None:
    """With autocommit off (``set_autocommit(False)``) the connection is in a transaction
    outside any ``atomic`` block: the commit joins it, as it joins an ``atomic`` one, and
    is not committed on its own by the batch that publishes during a commit."""
    d = StoreDefinition(f"pub{next(_names)}", None, lambda id: {"jobs": []})
    client = DatabaseStoreClient(alias)
    client.get_store(d, "q")  # remembered: the update is the transaction's first statement
    transaction.set_autocommit(False, using=alias)
    try:
        client.update_store(d, "q", updater=lambda s: s["jobs"].append("j"))
        transaction.rollback(using=alias)
    finally:
        transaction.set_autocommit(True, using=alias)
    assert StoreInstance.objects.using(alias).get(name=d.name).value == {"jobs": []}
    assert idle(alias)
