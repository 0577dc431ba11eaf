"""The engine's store steps: ``take``, ``update``, ``get`` and ``delete``, exactly once
per step.

User code (selectors, claims, updaters) runs in the store client's compare-and-swap loop,
outside any transaction; the step's heap row is handed to the store commit
(:meth:`~yieldstar_django.runtime.context.StepContext.commit_hook`), so the row and the
store's change (with its ledger entry) commit together or not at all. A client that
cannot take the hook (in memory, or on another database than the heap) commits alone, and
the step records its row right after (a replay finds the change in the ledger).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from .. import clock
from ..core.cohorts import selector_cohort
from ..core.commits import StoreDeletion, StoreMutation, VersionCondition
from ..core.definition import StoreDefinition
from ..core.durable import decode_durable, encode_durable
from ..core.results import (
    StoreDeleted,
    StoreSnapshot,
    StoreStepId,
    StoreTakeMatched,
    StoreTakeUnmatched,
    StoreUpdateResult,
    StoreWaiter,
)
from ..models.runtime import ExecutionStatus, StepKind
from .context import Kind, LedgerKey, StepContext
from .outcomes import StepResult, StepValue, Suspend, recorded_result
from .steps import StepCall

__all__ = [
    "DELETE",
    "GET",
    "TAKE",
    "UPDATE",
    "own_key",
    "revive",
    "selected_json",
    "store_key",
    "take",
    "update_json",
    "wait_for",
]


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


def store_key(call: StepCall, key: str) -> tuple[LedgerKey]:
    """The ledger entry of a step on one store: its own step key there."""
    assert call.definition is not None
    return ((call.definition.name, call.store_id, key),)


def own_key(call: StepCall, key: str) -> tuple[str]:
    """The waiter key of a take: its step key."""
    return (key,)


#: How many times a woken take looks at its store in one run before it registers a stale
#: observation to be woken again (through the broker).
STALE_LOOKS = 3


def take(
    ctx: StepContext, also: Callable[[str, datetime, str], datetime | None] | None = None
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
    call, key = ctx.call, ctx.key
    assert call.definition is not None and call.selector is not None
    definition = call.definition
    hooked: list[str] = []

    def prepare(mutation: StoreMutation) -> Callable[[], None]:
        encoded = selected_json(ctx, recorded_result(mutation))

        def write() -> None:
            complete(encoded, mutation.expected.instance_id)
            hooked.append(encoded)

        return write

    def complete(encoded: str, instance_id: str) -> None:
        now = clock.now()
        wake_at = also(encoded, now, instance_id) if also is not None else None
        ctx.record(encoded, wake_at=wake_at, now=now)

    for looks in range(1, STALE_LOOKS + 1):
        with ctx.commit_hook(prepare):
            result = ctx.client.take_from_store(
                definition,
                call.store_id,
                selector=call.selector,
                claim=call.claim,
                step_id=StoreStepId(ctx.execution_id, key),
            )
        if result.matched or ctx.row is None:
            break
        # Registering again replaces the step's waiter: a take's step key names one
        # store (its fingerprint), and a waiter is keyed by execution, step and store.
        # A store that moved since the selector read it (a woken run can read before
        # the commit that woke it is visible) is looked at again in this run.
        cohort = selector_cohort(call.selector)  # only a take that waits needs it
        if wait_for(
            ctx, key, definition, call.store_id, result, cohort, unless_stale=looks < STALE_LOOKS
        ):
            raise Suspend(ExecutionStatus.WAITING, key)
    if result.matched and hooked:
        encoded = hooked[-1]
    elif result.matched:
        # Committed by an earlier run, or by a client not handed the hook.
        encoded = selected_json(ctx, result)
        with ctx.atomic():
            ctx.drop_waiters()
            complete(encoded, result.instance_id)
    else:
        # Takers with the same selector are woken one at a time (a take waits on one
        # store; take_any's choices are woken alone: one may be woken for another's match).
        cohort = selector_cohort(call.selector)
        with ctx.atomic():
            ctx.pend()
            wait_for(ctx, key, definition, call.store_id, result, cohort)
        raise Suspend(ExecutionStatus.WAITING, key)
    return StepValue(decode_durable(encoded))


def wait_for(
    ctx: StepContext,
    key: str,
    definition: StoreDefinition,
    store_id: str,
    missed: StoreTakeUnmatched,
    cohort: str | None = None,
    *,
    unless_stale: bool = False,
) -> bool:
    """Register the waiter ``key`` of a take that ``missed`` on the store (fenced by the
    lease: :meth:`~yieldstar_django.runtime.context.StepContext.register_waiter`), in
    ``cohort`` (:mod:`yieldstar_django.core.cohorts`; ``None``: woken alone). ``False``:
    made ``unless_stale`` and the store had moved, nothing registered."""
    return ctx.register_waiter(
        StoreWaiter(
            workflow_id=ctx.execution.workflow_id,
            execution_id=ctx.execution_id,
            step_key=key,
            store_name=definition.name,
            store_id=store_id,
            instance_id=missed.instance_id,
            since_version=missed.version,
            read_paths=missed.read_paths,
            cohort=cohort,
        ),
        unless_stale=unless_stale,
    )


def update(ctx: StepContext) -> StepResult:
    """Update exactly once: the updater runs outside any transaction, and the heap row
    is written in the transaction of the store's commit."""
    call = ctx.call
    assert call.definition is not None and call.updater is not None
    hooked: list[str] = []

    def prepare(mutation: StoreMutation) -> Callable[[], None]:
        encoded = update_json(ctx, recorded_result(mutation))

        def write() -> None:
            ctx.record(encoded)
            hooked.append(encoded)

        return write

    with ctx.commit_hook(prepare):
        result = ctx.client.update_store(
            call.definition,
            call.store_id,
            updater=call.updater,
            step_id=StoreStepId(ctx.execution_id, ctx.key),
        )
    if hooked:
        encoded = hooked[-1]
    else:
        # Committed by an earlier run, or by a client not handed the hook.
        encoded = update_json(ctx, result)
        ctx.record(encoded)
    return StepValue(revive(StepKind.UPDATE, encoded))


def update_json(ctx: StepContext, result: Any) -> str:
    """The heap value of an update step: its state and versions."""
    assert isinstance(result, StoreUpdateResult)
    record = {
        "state": result.state,
        "previous_version": result.previous_version,
        "version": result.version,
    }
    return encode_durable(record, limits=ctx.record_limits, step_key=ctx.key)


def selected_json(ctx: StepContext, result: Any) -> str:
    """The heap value of a matched take: the selected value."""
    assert isinstance(result, StoreTakeMatched)
    return encode_durable(result.selected, limits=ctx.limits, step_key=ctx.key)


def get(ctx: StepContext) -> StepResult:
    """Read the store and record the snapshot, which every replay returns."""
    call = ctx.call
    assert call.definition is not None
    snapshot = ctx.client.get_store(call.definition, call.store_id)
    record = {
        "state": snapshot.state,
        "instance_id": snapshot.instance_id,
        "version": snapshot.version,
    }
    # A state past today's limits (written under larger ones) is raised into the
    # workflow here, as a step result that is not durable is.
    encoded = encode_durable(record, limits=ctx.record_limits, step_key=ctx.key)
    ctx.record(encoded)
    return StepValue(revive(StepKind.GET, encoded))


#: What ``step.delete`` deletes: the store at whatever version it is, if it exists (a
#: missing store is not created, and deletes nothing).
ANY_EXISTING = VersionCondition(any_version=True, existing_only=True)


def delete(ctx: StepContext) -> StepResult:
    """Delete the store exactly once: ``True`` if this step deleted it, ``False`` if there
    was none. The deletion is recorded in the ledger under the step's id (a receipt that
    outlives the store) and the heap row commits in the deletion's transaction; a missing
    store records only the heap row."""
    call = ctx.call
    assert call.definition is not None
    hooked: list[bool] = []

    def prepare(deletion: StoreDeletion) -> Callable[[], None]:
        def write() -> None:
            ctx.record("true")
            hooked.append(True)

        return write

    with ctx.deletion_hook(prepare):
        result = ctx.client.delete_store_if(
            call.definition,
            call.store_id,
            condition=ANY_EXISTING,
            step_id=StoreStepId(ctx.execution_id, ctx.key),
        )
    deleted = isinstance(result, StoreDeleted)
    if not hooked:
        # Deleted by an earlier run or by a client not handed the hook (the ledger says
        # so), or no store to delete.
        ctx.record("true" if deleted else "false")
    return StepValue(deleted)


def _replay(ctx: StepContext) -> Any:
    assert ctx.row is not None
    return revive(ctx.call.kind, ctx.row.value_json)


TAKE = Kind(StepKind.TAKE, take, ledger_keys=store_key, waiters=own_key)
UPDATE = Kind(StepKind.UPDATE, update, _replay, ledger_keys=store_key)
GET = Kind(StepKind.GET, get, _replay)
DELETE = Kind(StepKind.DELETE, delete, ledger_keys=store_key)
