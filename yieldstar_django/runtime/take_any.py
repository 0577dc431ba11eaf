"""``step.take_any``: wait until one of several (store, selector) choices matches.

Each run of a pending ``take_any`` step tries the choices in order, each in the store
client's CAS loop (user code runs outside any transaction); the first match commits its
claim, its ledger entry, the heap row ``[index, selected]`` and the removal of the step's
waiters in one transaction (a commit hook). If none matches, one transaction records
``[None, None]`` when the timeout has passed (dropping the waiters), or else each choice's
waiter is registered again with the version and paths its selector saw (replacing the
one before, so nothing is deleted first; in one transaction with the pending row and the
timer, if any), and the run suspends.

Runs of one execution are serialized by its lease, and the heap write is fenced by the
lease and unique per step, so a commit that would record a second claim rolls back with
it: exactly one choice is ever claimed (on the database client; the in-memory client
commits a claim before the heap row is written).

Choice ``i`` uses ``<key>#<i>`` as its waiter key and ledger step key, so two choices on
the same store neither share a waiter nor a ledger entry.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import nullcontext
from datetime import datetime, timedelta
from typing import Any, Final

from django.db import OperationalError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from .. import clock
from ..connector.client import in_callers_transaction
from ..core.commits import StoreMutation
from ..core.durable import decode_durable, encode_durable
from ..core.results import StoreStepId, StoreTakeMatched, StoreTakeUnmatched
from ..models.runtime import ExecutionStatus, StepKind
from ..sql import queries
from . import store_steps
from .context import Kind, LedgerKey, StepContext
from .outcomes import StepResult, StepValue, Suspend, recorded_result
from .steps import StepCall, derived_key

__all__ = ["GIVE_WAY_AFTER_MS", "TAKE_ANY", "choice_key", "execute", "revive"]

logger = logging.getLogger("yieldstar_django.runtime")

#: Milliseconds a registration of several choices waits for a store row's lock while it
#: holds another's, before it gives way (far below PostgreSQL's ``deadlock_timeout``, 1 s
#: by default, so a writer waiting for it is never the one a deadlock check cancels).
GIVE_WAY_AFTER_MS: Final = 50
#: PostgreSQL's SQLSTATE for a lock wait cut by ``lock_timeout``.
LOCK_NOT_AVAILABLE: Final = "55P03"


def choice_key(step_key: str, index: int) -> str:
    """The waiter and ledger step key of choice ``index`` of a ``take_any`` step."""
    return derived_key(step_key, f"#{index}")


def revive(value_json: str) -> tuple[int | None, Any]:
    """The step's return value, ``(index, selected)``, from its recorded text."""
    index, selected = decode_durable(value_json)
    return index, selected


def execute(ctx: StepContext) -> StepResult:
    """Run one attempt of the step; returns its value (or raises its suspend).

    Selectors and claims run outside any transaction (the store client's CAS loop, as for
    ``take``); a match's heap row and the removal of every choice's waiter are handed to
    the store commit as a commit hook, so they commit with the claim or not at all.
    """
    call, key, row = ctx.call, ctx.key, ctx.row
    encoded = ""
    wake_at = row.wake_at if row is not None else None
    misses: list[tuple[int, StoreTakeUnmatched]] = []
    for index, (definition, store_id, selector, claim) in enumerate(call.choices):
        hooked: list[str] = []

        def prepare(
            mutation: StoreMutation, index: int = index, hooked: list[str] = hooked
        ) -> Callable[[], None]:
            value = recorded_result(mutation)
            assert isinstance(value, StoreTakeMatched)
            text = encode_durable([index, value.selected], limits=ctx.record_limits, step_key=key)

            def write() -> None:
                ctx.record(text)
                hooked.append(text)

            return write

        with ctx.commit_hook(prepare):
            result = ctx.client.take_from_store(
                definition,
                store_id,
                selector=selector,
                claim=claim,
                step_id=StoreStepId(ctx.execution_id, choice_key(key, index)),
            )
        if result.matched:
            if hooked:
                encoded = hooked[-1]
            else:  # a client not handed the hook, or committed by an earlier run
                encoded = encode_durable(
                    [index, result.selected], limits=ctx.record_limits, step_key=key
                )
                with ctx.atomic():
                    ctx.drop_waiters()
                    ctx.record(encoded)
            break
        misses.append((index, result))
    if not encoded:
        now = clock.now()  # the timers' clock (``advance_time`` moves it)
        if wake_at is not None and now >= wake_at:
            encoded = "[null,null]"  # the timeout ran out first
            with ctx.atomic():
                ctx.drop_waiters()
                ctx.record(encoded)
        else:
            if row is None and call.timeout is not None:
                wake_at = now + timedelta(seconds=call.timeout)
            _wait_again(ctx, wake_at, misses)
            raise Suspend(ExecutionStatus.WAITING, key, wake_at)
    return StepValue(revive(encoded))


def _wait_again(
    ctx: StepContext, wake_at: datetime | None, misses: list[tuple[int, StoreTakeUnmatched]]
) -> None:
    """Every choice missed: write the pending row (first run) and the timer (``wake_at``),
    and register each choice's waiter again, which replaces it (a waiter is keyed by
    execution, step key and store), so none is dropped first.

    Several registrations share one transaction (one WAL flush). Each share-locks its
    store's row until that transaction ends, so it gives way rather than wait for a lock
    while holding one: after ``GIVE_WAY_AFTER_MS`` its transaction rolls back and each
    choice registers in a transaction of its own. A writer that changed one of those
    stores and waits for another therefore never deadlocks with it. In a transaction of the
    caller's, whose savepoint's ``SET LOCAL`` would outlast it, the caller's lock timeout is
    put back once they are done. A woken run's single registration, without a timer, is its
    own transaction.
    """
    call, key, row = ctx.call, ctx.key, ctx.row
    connection = connections[ctx.alias]
    # Registrations on the heap's database client take row locks in the heap's
    # transaction (PostgreSQL; SQLite serializes writers).
    give_way = (
        len(misses) > 1 and ctx.heap_client() is not None and connection.vendor == "postgresql"
    )
    pending = row is None or wake_at is not None

    def write_pending() -> None:
        if row is None:
            ctx.pend(wake_at=wake_at)
        if wake_at is not None:
            ctx.timer(wake_at, "take_any")

    def register() -> None:
        for index, missed in misses:
            definition, store_id = call.choices[index][0], call.choices[index][1]
            store_steps.wait_for(ctx, choice_key(key, index), definition, store_id, missed)

    # In a transaction of the caller's, the block below is a savepoint, whose SET LOCAL
    # would last until the caller's commit: the lock timeout is put back before it ends.
    callers = in_callers_transaction(connection)
    try:
        with ctx.atomic() if pending or len(misses) > 1 else nullcontext():
            restore = _give_way(connection, keep=callers) if give_way else None
            write_pending()
            register()
            if restore is not None:
                _set_lock_timeout(connection, restore)
    except OperationalError as exc:
        if not (give_way and getattr(exc.__cause__, "sqlstate", None) == LOCK_NOT_AVAILABLE):
            raise
        logger.info("execution %s: step %s gave way to a writer's lock", ctx.execution_id, key)
        with ctx.atomic() if pending else nullcontext():
            write_pending()
        register()  # each registration its own transaction


def _give_way(connection: BaseDatabaseWrapper, *, keep: bool) -> str | None:
    """Set ``lock_timeout`` to ``GIVE_WAY_AFTER_MS`` for the rest of the transaction; with
    ``keep`` (a savepoint in a transaction of the caller's), return the value before, to
    put back once the registrations are done (a rolled-back savepoint puts it back)."""
    previous = None
    with connection.cursor() as cursor:
        if keep:
            cursor.execute(queries.of(connection).current_lock_timeout)
            previous = str(cursor.fetchone()[0])
        cursor.execute(queries.of(connection).give_way_lock_timeout.format(ms=GIVE_WAY_AFTER_MS))
    return previous


def _set_lock_timeout(connection: BaseDatabaseWrapper, value: str) -> None:
    """``lock_timeout`` back to ``value`` for the rest of the current transaction."""
    with connection.cursor() as cursor:
        cursor.execute(queries.of(connection).set_lock_timeout, [value])


def _choice_keys(call: StepCall, key: str) -> tuple[str, ...]:
    """The waiter keys of a ``take_any`` step: one per choice."""
    return tuple(choice_key(key, index) for index in range(len(call.choices)))


def _ledger_keys(call: StepCall, key: str) -> list[LedgerKey]:
    """The ledger entries of a ``take_any`` step: one per choice, on its store."""
    return [
        (definition.name, store_id, choice_key(key, index))
        for index, (definition, store_id, _, _) in enumerate(call.choices)
    ]


def _replay(ctx: StepContext) -> tuple[int | None, Any]:
    assert ctx.row is not None
    return revive(ctx.row.value_json)


TAKE_ANY = Kind(StepKind.TAKE_ANY, execute, _replay, ledger_keys=_ledger_keys, waiters=_choice_keys)
