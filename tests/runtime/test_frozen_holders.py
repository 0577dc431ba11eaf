"""The relay ends the transaction of a run whose lease expired while its connection still
holds a store's row lock that another writer waits for (a worker frozen mid-transaction),
and nothing else: not while the lease is held, not a backend that blocks nobody.
PostgreSQL only (``pg_stat_activity``, ``pg_terminate_backend``), with real connections:
the frozen run is this test's connection, the writer and the relay are threads of their
own connections."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.db import DatabaseError, connection, connections, transaction
from django.test import override_settings
from django.utils import timezone

from tests.connections import DIRECT
from tests.polling import join_or_fail, wait_until
from tests.shared import outside
from tests.shared.fixtures import POSTGRES
from yieldstar_django.connector import get_store_client
from yieldstar_django.core.definition import define_store, unregister_store
from yieldstar_django.models import Execution
from yieldstar_django.runtime.leases import acquire_lease, reap_frozen_holders

pytestmark = POSTGRES.marks


@pytest.fixture
def store() -> Iterator[Any]:
    definition = define_store("frozen-holders", None, initial=lambda id: {"n": 0})
    yield definition
    unregister_store("frozen-holders")


def bump(draft: Any) -> None:
    draft["n"] += 1


class Writer(threading.Thread):
    """Another writer of the store, on its own connection."""

    def __init__(self, store: Any) -> None:
        super().__init__(daemon=True)
        self.store = store
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            get_store_client().update_store(self.store, "s", updater=bump)
        except BaseException as exc:
            self.error = exc
        finally:
            connections.close_all()


def waiting_for_a_lock() -> bool:
    """Whether a backend waits for a lock (read on a connection of its own: within a
    transaction, ``pg_stat_activity`` is read once)."""
    return bool(in_thread(_count_lock_waits))


def _count_lock_waits() -> bool:
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        )
        row = cursor.fetchone()
    return bool(row and row[0])


def in_thread(fn: Any) -> Any:
    """Run ``fn`` in a thread of its own connection (the relay); its result."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    join_or_fail(thread, what="the relay's upkeep")
    return out[0]


def expire(execution_id: str) -> None:
    in_thread(
        lambda: Execution.objects.filter(pk=execution_id).update(
            lease_expires_at=timezone.now() - timedelta(milliseconds=10)
        )
    )


@DIRECT
def test_the_relay_ends_a_frozen_lease_holders_transaction(store: Any) -> None:
    with outside.runtime_on("default"):
        outside.start("default", "wf", "frozen")
        get_store_client().update_store(store, "s", updater=bump)
        lease = acquire_lease("frozen")
        assert lease is not None
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            (pid,) = cursor.fetchone()
        assert Execution.objects.get(pk="frozen").lease_backend == pid
        writer = Writer(store)
        with pytest.raises(DatabaseError), transaction.atomic():
            get_store_client().update_store(store, "s", updater=bump)
            writer.start()
            wait_until("the writer to wait for the row lock", waiting_for_a_lock, 30)
            # The lease is held: the holder is left alone however long it waits.
            assert in_thread(lambda: reap_frozen_holders("default")) == []
            assert writer.is_alive()
            # Its keeper stopped renewing (the process is frozen): the lease expires.
            expire("frozen")
            assert in_thread(lambda: reap_frozen_holders("default")) == [("frozen", pid)]
            join_or_fail(writer, what="the writer, once the frozen transaction ended")
            assert writer.error is None
        connection.close()
        # The frozen run's change was rolled back; the writer's committed.
        assert get_store_client().get_store(store, "s").state == {"n": 2}


def test_a_holder_that_blocks_nobody_is_left_alone(store: Any) -> None:
    with outside.runtime_on("default"):
        outside.start("default", "wf", "idle")
        lease = acquire_lease("idle")
        assert lease is not None
        with transaction.atomic():
            get_store_client().update_store(store, "s", updater=bump)
            expire("idle")
            assert in_thread(lambda: reap_frozen_holders("default")) == []
        assert get_store_client().get_store(store, "s").state == {"n": 1}


def test_behind_a_transaction_pooler_the_relay_ends_nobody(store: Any) -> None:
    """With ``POOLER = "transaction"`` the backend that took a lease serves any client's
    transactions afterwards: the relay must not end it, even when it is the one that
    blocks a writer (it could be another client's transaction)."""
    with outside.runtime_on("default"):
        outside.start("default", "wf", "pooled")
        get_store_client().update_store(store, "s", updater=bump)
        assert acquire_lease("pooled") is not None
        writer = Writer(store)
        with transaction.atomic():
            get_store_client().update_store(store, "s", updater=bump)
            writer.start()
            wait_until("the writer to wait for the row lock", waiting_for_a_lock, 30)
            expire("pooled")
            with override_settings(YIELDSTAR={**settings.YIELDSTAR, "POOLER": "transaction"}):
                assert in_thread(lambda: reap_frozen_holders("default")) == []
            assert writer.is_alive()
        join_or_fail(writer, what="the writer, once the transaction committed")
        assert writer.error is None
        assert get_store_client().get_store(store, "s").state == {"n": 3}
