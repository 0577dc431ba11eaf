"""Store calls on a connection with autocommit off (``transaction.set_autocommit(False)``,
``AUTOCOMMIT: False``): they join the caller's transaction on both databases.

On SQLite Django opens no transaction there (``transaction_mode`` applies only to the
``BEGIN`` of an ``atomic`` block in autocommit): the driver begins a deferred one at the
first write, and a savepoint begins one that its release commits. The tests of concurrent
writes use a second connection (a thread's) on the same database file.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import connections, transaction

from tests.polling import HANG_SECONDS, join_or_fail
from tests.shared import outside
from tests.shared.fixtures import WakeCollector, db
from yieldstar_django.connector import DatabaseStoreClient
from yieldstar_django.core.definition import StoreDefinition, get_definition, unregister_store
from yieldstar_django.core.results import StoreWaiter
from yieldstar_django.models import (
    Execution,
    ExecutionStatus,
    ExecutionStep,
    StoreVersion,
    WakeIntent,
)
from yieldstar_django.runtime import (
    ResumeResult,
    cancel_execution,
    run_execution,
    start_workflow,
)
from yieldstar_django.runtime.registry import unregister_workflow

_names = itertools.count()

#: How long the other connection keeps its transaction (and SQLite's write lock) open.
HOLD_SECONDS = 1.0


def counter() -> StoreDefinition:
    return StoreDefinition(f"manual{next(_names)}", None, lambda id: {"n": 0})


def increment(state: Any) -> None:
    state["n"] += 1


def in_thread(alias: str, work: Callable[[], None]) -> threading.Thread:
    """Run ``work`` on a connection of its own (a new thread's), closed afterwards."""

    def run() -> None:
        try:
            work()
        finally:
            connections[alias].close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_manual_transaction_rolls_back_its_store_writes(alias: str, wakes: WakeCollector) -> None:
    """An update and a deletion made with autocommit off are undone by ``rollback()``: the
    store is back at its version, with its history."""
    d = counter()
    client = DatabaseStoreClient(alias)
    client.update_store(d, "c", updater=increment)
    client.update_store(d, "gone", updater=increment)
    transaction.set_autocommit(False, using=alias)
    try:
        client.update_store(d, "c", updater=increment)
        client.delete_store(d, "gone")
        transaction.rollback(using=alias)
    finally:
        transaction.set_autocommit(True, using=alias)
    fresh = DatabaseStoreClient(alias)
    assert fresh.get_store(d, "c").state == {"n": 1}
    assert fresh.read_store(d, "gone") is not None, "the deletion was rolled back"
    versions = StoreVersion.objects.using(alias).filter(store_name=d.name, store_id="c")
    assert sorted(versions.values_list("version", flat=True)) == [0, 1]


@db("sqlite")
def test_a_manual_transaction_waits_for_the_sqlite_write_lock(wakes: WakeCollector) -> None:
    """While another connection holds the write lock, an update made with autocommit off
    waits for it (the busy ``timeout``), then commits from the state it committed, rather
    than failing at once with "database is locked"."""
    d = counter()
    client = DatabaseStoreClient("sqlite")
    client.update_store(d, "c", updater=increment)
    held = threading.Event()

    def hold() -> None:
        with transaction.atomic(using="sqlite"):
            DatabaseStoreClient("sqlite").update_store(d, "c", updater=increment)
            held.set()
            time.sleep(HOLD_SECONDS)

    holder = in_thread("sqlite", hold)
    assert held.wait(HANG_SECONDS)
    transaction.set_autocommit(False, using="sqlite")
    try:
        result = client.update_store(d, "c", updater=increment)
        transaction.commit(using="sqlite")
    finally:
        transaction.set_autocommit(True, using="sqlite")
        join_or_fail(holder, what="the holder")
    assert result.state == {"n": 3}
    assert DatabaseStoreClient("sqlite").get_store(d, "c").state == {"n": 3}


@db("sqlite")
def test_a_manual_registration_is_linearizable_with_a_commit(wakes: WakeCollector) -> None:
    """A waiter registered with autocommit off while another connection commits a change
    it reads: the registration reads the store row, then the commit is tried, then the
    registration writes. The commit either waits for the registration (and wakes the
    waiter) or came first (and the registration, stale, is woken at once): the execution
    has a wake intent either way."""
    d = StoreDefinition(f"manual{next(_names)}", None, lambda id: {})
    client = DatabaseStoreClient("sqlite")
    taken = client.take_from_store(d, "s", selector=lambda s: s.get("k"), claim=None)
    assert not taken.matched
    row_read, resumed = threading.Event(), threading.Event()

    def pause_after_the_row(execute: Any, sql: str, *args: Any) -> Any:
        result = execute(sql, *args)
        if sql.startswith("SELECT id, instance_id, version FROM yieldstar_storeinstance"):
            row_read.set()
            resumed.wait(HOLD_SECONDS)  # the commit's turn, if it can take it
        return result

    def commit_the_change() -> None:
        assert row_read.wait(HANG_SECONDS)
        try:
            DatabaseStoreClient("sqlite").update_store(d, "s", updater=lambda s: s.update(k=1))
        finally:
            resumed.set()

    mutator = in_thread("sqlite", commit_the_change)
    waiter = StoreWaiter(
        "wf", "e", "take", d.name, "s", taken.instance_id, taken.version, taken.read_paths
    )
    transaction.set_autocommit(False, using="sqlite")
    try:
        with connections["sqlite"].execute_wrapper(pause_after_the_row):
            client.register_waiter(waiter)
        transaction.commit(using="sqlite")
    finally:
        transaction.set_autocommit(True, using="sqlite")
        resumed.set()
        join_or_fail(mutator, what="the mutator")
    assert DatabaseStoreClient("sqlite").get_store(d, "s").state == {"k": 1}
    reasons = list(
        WakeIntent.objects.using("sqlite").filter(execution_id="e").values_list("reason", flat=True)
    )
    assert reasons != [], "the waiter lost its wake"


def test_a_run_in_a_manual_transaction_is_undone_by_rollback(
    alias: str, wakes: WakeCollector
) -> None:
    """``run_execution`` with autocommit off: its lease, its heap and its store step join
    the caller's transaction, and ``rollback()`` puts the execution back where it was."""
    store_name, workflow_id = f"manual{next(_names)}", f"manual-wf{next(_names)}"
    with outside.runtime_on(alias):
        outside.define_counter(store_name, workflow_id)
        try:
            execution_id = start_workflow(workflow_id)
            transaction.set_autocommit(False, using=alias)
            try:
                assert run_execution(execution_id) == ResumeResult.FINISHED
                transaction.rollback(using=alias)
            finally:
                transaction.set_autocommit(True, using=alias)
            execution = Execution.objects.using(alias).get(pk=execution_id)
            assert (execution.status, execution.runs) == (ExecutionStatus.PENDING, 0)
            assert not ExecutionStep.objects.using(alias).filter(execution=execution_id).exists()
            store = get_definition(store_name)
            assert store is not None
            assert DatabaseStoreClient(alias).read_store(store, "s") is None
        finally:
            unregister_workflow(workflow_id)
            unregister_store(store_name)


def test_a_cancel_in_a_manual_transaction_is_undone_by_rollback(
    alias: str, wakes: WakeCollector
) -> None:
    """``cancel_execution`` with autocommit off: ``rollback()`` cancels nothing."""
    store_name, workflow_id = f"manual{next(_names)}", f"manual-wf{next(_names)}"
    with outside.runtime_on(alias):
        outside.define_counter(store_name, workflow_id)
        try:
            execution_id = start_workflow(workflow_id)
            transaction.set_autocommit(False, using=alias)
            try:
                assert cancel_execution(execution_id)
                transaction.rollback(using=alias)
            finally:
                transaction.set_autocommit(True, using=alias)
            status = Execution.objects.using(alias).get(pk=execution_id).status
            assert status == ExecutionStatus.PENDING
        finally:
            unregister_workflow(workflow_id)
            unregister_store(store_name)
