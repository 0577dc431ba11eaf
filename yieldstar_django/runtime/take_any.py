"""``step.take_any``: wait until one of several (store, selector) choices matches.

Each run of a pending ``take_any`` step does, in one transaction: drop the step's waiters,
try the choices in order, and either commit the first match (its claim, its ledger entry
and the heap row ``[index, selected]``), or, when the timeout has passed, record
``[None, None]``, or else register one waiter per choice (with the version and paths its
selector saw) and suspend. Runs of one execution are serialized by its lease, and the heap
write is fenced by the lease and unique per step, so a transaction that would record a
second claim rolls back with it: exactly one choice is ever claimed (on the database
client; the in-memory client has no rollback).

Choice ``i`` uses ``<key>#<i>`` as its waiter key and ledger step key, so two choices on
the same store neither share a waiter nor a ledger entry.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, transaction
from django.utils import timezone

from ..core.durable import decode_durable, encode_durable
from ..core.errors import StoreContentionError
from ..core.results import StoreStepId, StoreTakeUnmatched, StoreWaiter
from ..models.runtime import ExecutionStatus, ExecutionStep, StepStatus
from .leases import LeaseLost

if TYPE_CHECKING:
    from .engine import Engine, _Result
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
) -> _Result:
    """Run one attempt of the step; returns the engine's result (or raises its suspend)."""
    from .engine import _Error, _Suspend, _Value

    client = engine.client
    execution = engine.execution
    now = timezone.now()
    encoded = ""
    wake_at = row.wake_at if row is not None else None
    try:
        with transaction.atomic(using=engine.alias):
            if row is not None:
                _remove_waiters(engine, key, len(call.choices))
            misses: list[tuple[int, StoreTakeUnmatched]] = []
            for index, (definition, store_id, selector, claim) in enumerate(call.choices):
                result = client.take_from_store(
                    definition,
                    store_id,
                    selector=selector,
                    claim=claim,
                    step_id=StoreStepId(execution.id, choice_key(key, index)),
                )
                if result.matched:
                    encoded = encode_durable(
                        [index, result.selected], limits=engine.limits, step_key=key
                    )
                    break
                misses.append((index, result))
            if not encoded and wake_at is not None and now >= wake_at:
                encoded = "[null,null]"  # the timeout ran out first
            if encoded:
                engine._write(
                    call, key, position, row, status=StepStatus.COMPLETED, value_json=encoded
                )
            else:
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
                    client.register_waiter(
                        StoreWaiter(
                            workflow_id=execution.workflow_name,
                            execution_id=execution.id,
                            step_key=choice_key(key, index),
                            store_name=definition.name,
                            store_id=store_id,
                            instance_id=missed.instance_id,
                            since_version=missed.version,
                            read_paths=missed.read_paths,
                        )
                    )
                engine.open_takes.add(key)
    except (LeaseLost, DatabaseError):
        raise
    except StoreContentionError:
        engine._contended(key)
    except Exception as exc:
        with transaction.atomic(using=engine.alias):
            engine._record_error(call, key, position, row, exc, 1)
            if row is not None:
                _remove_waiters(engine, key, len(call.choices))
        engine.open_takes.discard(key)
        return _Error(exc)
    if not encoded:
        raise _Suspend(ExecutionStatus.WAITING, key, wake_at)
    engine.open_takes.discard(key)
    return _Value(revive(encoded))


def _remove_waiters(engine: Engine, key: str, count: int) -> None:
    for index in range(count):
        engine.client.remove_waiters(engine.execution.id, choice_key(key, index))
