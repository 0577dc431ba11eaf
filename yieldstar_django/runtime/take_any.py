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

from collections.abc import Callable
from contextlib import nullcontext
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, transaction
from django.utils import timezone

from ..connector import CommitHook
from ..core.commits import StoreMutation
from ..core.durable import decode_durable, encode_durable
from ..core.errors import StoreContentionError
from ..core.results import StoreStepId, StoreTakeMatched, StoreTakeUnmatched
from ..models.runtime import ExecutionStatus, ExecutionStep, StepStatus
from . import store_steps
from .leases import LeaseLost
from .outcomes import StepResult, StepValue, Suspend, recorded_result

if TYPE_CHECKING:
    from .engine import Engine
    from .steps import StepCall

__all__ = ["choice_key", "execute", "revive"]


def choice_key(step_key: str, index: int) -> str:
    """The waiter and ledger step key of choice ``index`` of a ``take_any`` step."""
    return f"{step_key}#{index}"


def revive(value_json: str) -> tuple[int | None, Any]:
    """The step's return value, ``(index, selected)``, from its recorded text."""
    index, selected = decode_durable(value_json)
    return index, selected


def execute(
    engine: Engine, call: StepCall, key: str, position: int, row: ExecutionStep | None
) -> StepResult:
    """Run one attempt of the step; returns the engine's result (or raises its suspend).

    Selectors and claims run outside any transaction (the store client's CAS loop, as for
    ``take``); a match's heap row and the removal of every choice's waiter are handed to
    the store commit as a commit hook, so they commit with the claim or not at all.
    """
    client = engine.client
    execution = engine.execution
    encoded = ""
    wake_at = row.wake_at if row is not None else None

    def drop_waiters() -> None:
        if row is not None:
            _remove_waiters(engine, key, len(call.choices))

    unwait = tuple(choice_key(key, i) for i in range(len(call.choices))) if row is not None else ()
    try:
        misses: list[tuple[int, StoreTakeUnmatched]] = []
        for index, (definition, store_id, selector, claim) in enumerate(call.choices):
            hooked: list[str] = []

            def record(
                mutation: StoreMutation, index: int = index, hooked: list[str] = hooked
            ) -> Callable[[], None]:
                value = recorded_result(mutation)
                assert isinstance(value, StoreTakeMatched)
                text = encode_durable([index, value.selected], limits=engine.limits, step_key=key)

                def write() -> None:
                    engine._write(
                        call, key, position, row, status=StepStatus.COMPLETED, value_json=text
                    )
                    hooked.append(text)

                return write

            with store_steps.commit_hook(engine, CommitHook(record, unwait, engine.reads)):
                result = client.take_from_store(
                    definition,
                    store_id,
                    selector=selector,
                    claim=claim,
                    step_id=StoreStepId(execution.id, choice_key(key, index)),
                )
            if result.matched:
                if hooked:
                    encoded = hooked[-1]
                else:  # a client without commit hooks, or committed by an earlier run
                    encoded = encode_durable(
                        [index, result.selected], limits=engine.limits, step_key=key
                    )
                    with transaction.atomic(using=engine.alias):
                        drop_waiters()
                        engine._write(
                            call,
                            key,
                            position,
                            row,
                            status=StepStatus.COMPLETED,
                            value_json=encoded,
                        )
                break
            misses.append((index, result))
        if not encoded:
            now = timezone.now()
            if wake_at is not None and now >= wake_at:
                encoded = "[null,null]"  # the timeout ran out first
                with transaction.atomic(using=engine.alias):
                    drop_waiters()
                    engine._write(
                        call, key, position, row, status=StepStatus.COMPLETED, value_json=encoded
                    )
            else:
                # Every choice missed: registering each again replaces its waiter (a
                # waiter is keyed by execution, step key and store), so none is dropped
                # first. Several registrations share one transaction (one WAL flush);
                # a woken run's single registration, without a timer, is its own.
                opens = row is None or wake_at is not None or len(misses) > 1
                with transaction.atomic(using=engine.alias) if opens else nullcontext():
                    if row is None:
                        if call.timeout is not None:
                            wake_at = now + timedelta(seconds=call.timeout)
                        engine._write(
                            call, key, position, None, status=StepStatus.PENDING, wake_at=wake_at
                        )
                    if wake_at is not None:
                        engine._timer(wake_at, "take_any")
                    for index, missed in misses:
                        definition, store_id = call.choices[index][0], call.choices[index][1]
                        store_steps.wait_for(
                            engine, choice_key(key, index), definition, store_id, missed
                        )
                    engine.open_takes.add(key)
    except (LeaseLost, DatabaseError):
        raise
    except StoreContentionError:
        engine._contended(key)
    except Exception as exc:
        return store_steps.take_failed(engine, call, key, position, row, exc, drop_waiters)
    if not encoded:
        raise Suspend(ExecutionStatus.WAITING, key, wake_at)
    engine.open_takes.discard(key)
    return StepValue(revive(encoded))


def _remove_waiters(engine: Engine, key: str, count: int) -> None:
    for index in range(count):
        engine.client.remove_waiters(engine.execution.id, choice_key(key, index))
