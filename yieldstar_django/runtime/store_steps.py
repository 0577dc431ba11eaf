"""The engine's store steps: ``take``, ``update`` and ``get``, exactly once per step.

User code (selectors, claims, updaters) runs in the store client's compare-and-swap loop,
outside any transaction; the step's heap row is handed to the store commit as a
:class:`~yieldstar_django.connector.CommitHook`, so the row and the store's change (with
its ledger entry) commit together or not at all. A client that cannot take the hook (in
memory, or on another database than the heap) commits alone, and the step records its row
right after (a replay finds the change in the ledger).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from django.db import DatabaseError, transaction

from .. import clock
from ..connector import CommitHook, DatabaseStoreClient, LeaseNotHeld
from ..core.commits import StoreMutation
from ..core.definition import StoreDefinition
from ..core.durable import decode_durable, encode_durable
from ..core.errors import StoreContentionError
from ..core.results import (
    StoreSnapshot,
    StoreStepId,
    StoreTakeMatched,
    StoreTakeUnmatched,
    StoreUpdateResult,
    StoreWaiter,
)
from ..models.runtime import ExecutionStatus, ExecutionStep, StepKind, StepStatus
from .leases import LeaseLost
from .outcomes import NOT_RECORDED, StepError, StepResult, StepValue, Suspend, recorded_result

if TYPE_CHECKING:
    from .engine import Engine
    from .steps import StepCall

__all__ = [
    "PASSED_THROUGH",
    "commit_hook",
    "get",
    "heap_client",
    "revive",
    "selected_json",
    "take",
    "take_failed",
    "update",
    "update_json",
    "wait_for",
]


#: What a store step lets through, unrecorded: a run that lost its lease, a database error
#: (the run ends, the execution resumes later) and the worker's own stops.
PASSED_THROUGH: Final[tuple[type[BaseException], ...]] = (LeaseLost, DatabaseError, *NOT_RECORDED)


def revive(kind: str, value_json: str) -> Any:
    """A recorded step's return value from its heap text (``""``: ``None``): the result
    types of ``update`` and ``get``, the plain value otherwise."""
    if not value_json:
        return None
    value = decode_durable(value_json)
    if kind == StepKind.UPDATE:
        return StoreUpdateResult(value["state"], value["previous_version"], value["version"])
    if kind == StepKind.GET:
        return StoreSnapshot(value["state"], value["instance_id"], value["version"])
    return value


def take(
    engine: Engine,
    call: StepCall,
    key: str,
    position: int,
    row: ExecutionStep | None,
    also: Callable[[str, datetime, str], datetime | None] | None = None,
) -> StepResult:
    """Take, and record a match in the same transaction as the store's commit.

    ``also(selected_json, now, instance_id)`` is more database work of the step, in the
    transaction of its heap row (a claim lease); it returns the row's ``wake_at`` (or
    ``None``), ``now`` is the row's ``recorded_at`` and ``instance_id`` the instance of the
    store the claim committed on.

    The selector and claim run outside any transaction (the store client's CAS loop);
    the commit itself drops the step's waiter (so the claim does not wake this very
    execution), and its transaction ends with the fenced heap row. No match registers the
    waiter again with the version and paths the selector saw, which wakes it at once
    if the store moved since. Wakes of other waiters go out when the commit commits.
    """
    assert call.definition is not None and call.selector is not None
    definition = call.definition
    hooked: list[str] = []

    def drop_waiter() -> None:
        if row is not None:
            engine.client.remove_waiters(engine.execution.id, key)

    def record(mutation: StoreMutation) -> Callable[[], None]:
        encoded = selected_json(engine, key, recorded_result(mutation))

        def write() -> None:
            complete(encoded, mutation.expected.instance_id)
            hooked.append(encoded)

        return write

    def complete(encoded: str, instance_id: str) -> None:
        now = clock.now()
        wake_at = also(encoded, now, instance_id) if also is not None else None
        engine._write(
            call,
            key,
            position,
            row,
            status=StepStatus.COMPLETED,
            value_json=encoded,
            wake_at=wake_at,
            now=now,
        )

    try:
        unwait = (key,) if row is not None else ()
        with commit_hook(engine, CommitHook(record, unwait, engine.reads)):
            result = engine.client.take_from_store(
                definition,
                call.store_id,
                selector=call.selector,
                claim=call.claim,
                step_id=StoreStepId(engine.execution.id, key),
            )
        if result.matched and hooked:
            encoded = hooked[-1]
        elif result.matched:
            # Committed by an earlier run, or by a client not handed the hook.
            encoded = selected_json(engine, key, result)
            with transaction.atomic(using=engine.alias):
                drop_waiter()
                complete(encoded, result.instance_id)
        elif row is None:
            with transaction.atomic(using=engine.alias):
                engine._write(call, key, position, None, status=StepStatus.PENDING)
                wait_for(engine, key, definition, call.store_id, result)
        else:
            # Registering again replaces the step's waiter: a take's step key names one
            # store (its fingerprint), and a waiter is keyed by execution, step and store.
            wait_for(engine, key, definition, call.store_id, result)
    except PASSED_THROUGH:
        raise
    except StoreContentionError:
        engine._contended(key)
    except Exception as exc:

        def forget_waiter() -> None:
            if row is not None:
                engine.client.remove_waiters(engine.execution.id, key)

        return take_failed(engine, call, key, position, row, exc, forget_waiter)
    if not result.matched:
        raise Suspend(ExecutionStatus.WAITING, key)
    engine.open_takes.discard(key)
    return StepValue(decode_durable(encoded))


def wait_for(
    engine: Engine, key: str, definition: StoreDefinition, store_id: str, missed: StoreTakeUnmatched
) -> None:
    """Register the waiter of a take (step ``key``) that ``missed`` on the store.

    On the heap's database the registration is fenced by the lease, as the heap writes
    are, in the registration's transaction (the caller's, if any; no statement more on
    PostgreSQL): a run whose lease was taken over while its take ran (its successor may
    have completed the step) registers nothing and stops with ``LeaseLost``. A client
    elsewhere (in memory, another database) registers unfenced; a run that lost its lease
    then removes the waiters of an execution that finished meanwhile
    (``executions._forget_waiters_if_finished``).
    """
    waiter = StoreWaiter(
        workflow_id=engine.execution.workflow_id,
        execution_id=engine.execution.id,
        step_key=key,
        store_name=definition.name,
        store_id=store_id,
        instance_id=missed.instance_id,
        since_version=missed.version,
        read_paths=missed.read_paths,
    )
    client = heap_client(engine)
    if client is None:
        engine.client.register_waiter(waiter)
        return
    try:
        client.register_waiter(waiter, fence=engine.lease.waiter_fence())
    except LeaseNotHeld:
        raise LeaseLost(engine.execution.id) from None


def take_failed(
    engine: Engine,
    call: StepCall,
    key: str,
    position: int,
    row: ExecutionStep | None,
    exc: Exception,
    forget_waiters: Callable[[], None],
) -> StepError:
    """A take whose user code raised: the error recorded with its waiters gone."""
    with transaction.atomic(using=engine.alias):
        engine._record_error(call, key, position, row, exc, 1)
        forget_waiters()
    engine.open_takes.discard(key)
    return StepError(exc)


def update(
    engine: Engine, call: StepCall, key: str, position: int, row: ExecutionStep | None
) -> StepResult:
    """Update exactly once: the updater runs outside any transaction, and the heap row
    is written in the transaction of the store's commit."""
    assert call.definition is not None and call.updater is not None
    hooked: list[str] = []

    def record(mutation: StoreMutation) -> Callable[[], None]:
        encoded = update_json(engine, key, recorded_result(mutation))

        def write() -> None:
            engine._write(call, key, position, row, status=StepStatus.COMPLETED, value_json=encoded)
            hooked.append(encoded)

        return write

    try:
        with commit_hook(engine, CommitHook(record)):
            result = engine.client.update_store(
                call.definition,
                call.store_id,
                updater=call.updater,
                step_id=StoreStepId(engine.execution.id, key),
            )
        if hooked:
            encoded = hooked[-1]
        else:
            # Committed by an earlier run, or by a client not handed the hook.
            encoded = update_json(engine, key, result)
            engine._write(call, key, position, row, status=StepStatus.COMPLETED, value_json=encoded)
    except PASSED_THROUGH:
        raise
    except StoreContentionError:
        engine._contended(key)
    except Exception as exc:
        engine._record_error(call, key, position, row, exc, 1)
        return StepError(exc)
    return StepValue(revive(StepKind.UPDATE, encoded))


def commit_hook(engine: Engine, hook: CommitHook) -> AbstractContextManager[None]:
    """Hand ``hook`` to the store client's commits, so a step's heap row commits with
    the store. A client that cannot (in memory, or on another database than the heap)
    commits alone, and the step records its row right after."""
    client = heap_client(engine)
    return nullcontext() if client is None else client.commit_hook(hook)


def heap_client(engine: Engine) -> DatabaseStoreClient | None:
    """``engine``'s store client if it is the database client on the heap's database (its
    commits take the heap's rows, its registrations the lease's fence); else ``None``."""
    client = engine.client
    if isinstance(client, DatabaseStoreClient) and client.using == engine.alias:
        return client
    return None


def update_json(engine: Engine, key: str, result: Any) -> str:
    """The heap value of an update step: its state and versions."""
    assert isinstance(result, StoreUpdateResult)
    record = {
        "state": result.state,
        "previous_version": result.previous_version,
        "version": result.version,
    }
    return encode_durable(record, limits=engine.record_limits, step_key=key)


def selected_json(engine: Engine, key: str, result: Any) -> str:
    """The heap value of a matched take: the selected value."""
    assert isinstance(result, StoreTakeMatched)
    return encode_durable(result.selected, limits=engine.limits, step_key=key)


def get(
    engine: Engine, call: StepCall, key: str, position: int, row: ExecutionStep | None
) -> StepResult:
    assert call.definition is not None
    try:
        snapshot = engine.client.get_store(call.definition, call.store_id)
        record = {
            "state": snapshot.state,
            "instance_id": snapshot.instance_id,
            "version": snapshot.version,
        }
        # A state past today's limits (written under larger ones) is raised into the
        # workflow here, as a step result that is not durable is.
        encoded = encode_durable(record, limits=engine.record_limits, step_key=key)
    except PASSED_THROUGH:
        raise
    except Exception as exc:
        engine._record_error(call, key, position, row, exc, 1)
        return StepError(exc)
    engine._write(call, key, position, row, status=StepStatus.COMPLETED, value_json=encoded)
    return StepValue(revive(StepKind.GET, encoded))
