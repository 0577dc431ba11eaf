"""The isolation level of PostgreSQL connections: the connector needs READ COMMITTED.

A commit's waiter lookup follows its row lock and must see every waiter registered before
it got the lock. At REPEATABLE READ (``OPTIONS["isolation_level"]``, which Django applies
to the transactions it opens, such as a ``transaction.atomic`` block and every workflow
step's commit) the lookup reads the snapshot the transaction took before it waited for
the lock, and a registration that committed meanwhile is missed: a lost wake.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from django.db import connections, transaction
from django.test.utils import override_settings

from tests.connections import await_lock_wait
from tests.polling import HANG_SECONDS, join_or_fail
from tests.shared.fixtures import WakeCollector, db
from yieldstar_django import checks
from yieldstar_django.connector import DatabaseStoreClient
from yieldstar_django.core.definition import StoreDefinition
from yieldstar_django.core.results import StoreWaiter, Wake

pytestmark = pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")


@pytest.mark.postgres
@db("default")
@pytest.mark.xfail(
    strict=True,
    reason="outside READ COMMITTED a commit misses a waiter registered while it waited for "
    "the row lock; yieldstar.E006 refuses such a configuration",
)
def test_repeatable_read_loses_a_wake_registered_while_the_commit_waits(
    wakes: WakeCollector,
) -> None:
    """Execution ``e`` registers a waiter on ``a`` in a transaction that holds the row's
    ``FOR SHARE`` lock; a writer at REPEATABLE READ reads, then waits for the lock; the
    registration commits, then the writer commits a change of ``a``. The registration saw
    version 0, so it is not stale; only the writer's waiter lookup can wake ``e``."""
    d = StoreDefinition("isolation", None, lambda id: {"a": 0})
    client = DatabaseStoreClient("default")
    snap = client.get_store(d, "q")
    registered, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def register() -> None:
        try:
            with transaction.atomic():
                client.register_waiter(
                    StoreWaiter("wf", "e", "k", d.name, "q", snap.instance_id, 0, [("a",)])
                )
                registered.set()
                assert release.wait(HANG_SECONDS), "the test never released the registration"
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
            registered.set()
        finally:
            connections.close_all()

    def write() -> None:
        try:
            connection = connections["default"]
            connection.ensure_connection()
            writer_pid.append(connection.connection.info.backend_pid)
            # What Django does on connect with OPTIONS["isolation_level"].
            connection.connection.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            with transaction.atomic():
                client.update_store(d, "q", updater=lambda s: s.update(a=1))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    writer_pid: list[int] = []
    registrar = threading.Thread(target=register)
    registrar.start()
    assert registered.wait(HANG_SECONDS), "the registration never ran"
    writer = threading.Thread(target=write)
    writer.start()
    await_lock_wait(writer_pid, "the writer")  # for the registration's row lock
    release.set()
    join_or_fail(registrar, writer, what="the registration and the writer")
    assert not errors, errors

    assert client.get_store(d, "q").version == 1
    assert wakes == [Wake("e", "wf")], "the change of 'a' must wake the waiter of 'a'"


def postgres(**options: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"ENGINE": "django.db.backends.postgresql", "NAME": "x"}
    if options:
        entry["OPTIONS"] = options
    return entry


@pytest.mark.parametrize(
    "level",
    [
        psycopg.IsolationLevel.REPEATABLE_READ,
        psycopg.IsolationLevel.SERIALIZABLE,
        psycopg.IsolationLevel.READ_UNCOMMITTED,  # PostgreSQL runs it as READ COMMITTED
    ],
)
def test_a_postgres_isolation_level_other_than_read_committed_is_an_error(level: Any) -> None:
    with override_settings(DATABASES={"default": postgres(isolation_level=level)}):
        messages = checks.check_postgres_isolation_level()
    expected = [] if level == psycopg.IsolationLevel.READ_UNCOMMITTED else ["yieldstar.E006"]
    assert [m.id for m in messages] == expected
    if messages:
        assert "READ COMMITTED" in messages[0].msg
        assert messages[0].obj == "default"


def test_the_isolation_check_is_registered() -> None:
    from django.core.checks import registry

    assert checks.check_postgres_isolation_level in registry.registry.get_checks()


@pytest.mark.parametrize(
    "options", [{}, {"isolation_level": psycopg.IsolationLevel.READ_COMMITTED}]
)
def test_read_committed_passes(options: dict[str, Any]) -> None:
    with override_settings(DATABASES={"default": postgres(**options)}):
        assert checks.check_postgres_isolation_level() == []


def test_only_the_database_yieldstar_uses_is_checked() -> None:
    """Another database may run at any level: yieldstar commits on ``DATABASE_ALIAS``."""
    analytics = postgres(isolation_level=psycopg.IsolationLevel.SERIALIZABLE)
    with override_settings(DATABASES={"default": postgres(), "analytics": analytics}):
        assert checks.check_postgres_isolation_level() == []
        with override_settings(YIELDSTAR={"DATABASE_ALIAS": "analytics"}):
            assert [m.obj for m in checks.check_postgres_isolation_level()] == ["analytics"]
