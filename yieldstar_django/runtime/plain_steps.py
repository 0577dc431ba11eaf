"""``step.run`` and ``step.sleep``: the steps that touch no store.

A ``run`` step calls the workflow's function outside any transaction of the runtime's (in
a savepoint of the caller's transaction, if the run is inside one: :func:`step_savepoints`)
and records its result, or its error, with the number of attempts; a ``RetryableError``
records the step ``pending`` and retries it on a durable timer. A ``sleep`` records its
wake-up time on its first run and completes on the first run at or after it.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from typing import Any

from django.db import connections, transaction

from .. import clock
from ..connector.client import in_callers_transaction
from ..core.durable import decode_durable, encode_durable
from ..models.runtime import ExecutionStatus, StepKind
from .context import Kind, StepContext
from .errors import RetryableError
from .outcomes import NOT_RECORDED, StepResult, StepValue, Suspend, encode_error

__all__ = [
    "RUN",
    "SLEEP",
    "attempt_due",
    "encode_result",
    "retry_or_fail",
    "step_savepoints",
]


def run(ctx: StepContext) -> StepResult:
    """Call the step's function and record what it returns or raises (any error but the
    worker's own stops, ``NOT_RECORDED``, which end the run unrecorded)."""
    call = ctx.call
    attempts = attempt_due(ctx)
    assert call.fn is not None
    try:
        with step_savepoints():
            value = call.fn(*call.args, **call.kwargs)
        encoded = encode_result(ctx, value)
    except NOT_RECORDED:
        raise
    except BaseException as exc:
        return retry_or_fail(ctx, exc, attempts)
    ctx.record(encoded, attempts=attempts)
    return StepValue(decode_durable(encoded))


def attempt_due(ctx: StepContext) -> int:
    """The number of the attempt a ``run`` (or ``atomic``) step makes now; if an earlier
    attempt failed with a ``RetryableError`` and its retry is not due yet, arm its timer
    again and suspend (``Suspend``)."""
    row = ctx.row
    if row is not None and row.wake_at is not None and row.wake_at > clock.now():
        ctx.timer(row.wake_at, "retry")
        raise Suspend(ExecutionStatus.RETRYING, ctx.key, row.wake_at)
    return (row.attempts if row is not None else 0) + 1


def encode_result(ctx: StepContext, value: Any) -> str:
    """The durable text of a step function's result; ``TypeError`` for a coroutine or a
    generator (closed), ``WorkflowValueError`` for a value that is not durable."""
    if inspect.isawaitable(value) or inspect.isgenerator(value):
        close = getattr(value, "close", None)
        if close is not None:
            close()
        raise TypeError(
            f"step.{ctx.call.kind}() needs a plain function; {ctx.call.fingerprint} returned "
            f"{type(value).__name__}"
        )
    return encode_durable(
        value, limits=ctx.limits, step_key=ctx.key, label=f"The result of step {ctx.key!r}"
    )


def retry_or_fail(ctx: StepContext, exc: BaseException, attempts: int) -> StepResult:
    """Settle the error of attempt ``attempts`` of a step function: a ``RetryableError``
    with attempts left records the step ``pending`` with a durable timer and suspends
    (``Suspend``); any other error (or the last attempt's) is recorded as the step's."""
    if isinstance(exc, RetryableError):
        if attempts < exc.max_attempts:
            wake_at = clock.now() + timedelta(seconds=exc.delay_after(attempts))
            with ctx.atomic():
                ctx.pend(attempts=attempts, error_json=encode_error(exc), wake_at=wake_at)
                ctx.timer(wake_at, "retry")
            raise Suspend(ExecutionStatus.RETRYING, ctx.key, wake_at) from None
        return ctx.fail(exc.final_error(), attempts=attempts)
    return ctx.fail(exc, attempts=attempts)


def sleep(ctx: StepContext) -> StepResult:
    """Record the wake-up time and suspend until it (a durable timer); then complete."""
    now = clock.now()
    row = ctx.row
    if row is None:
        if ctx.call.seconds <= 0:
            ctx.record(wake_at=now, now=now)
            return StepValue(None)
        wake_at = now + timedelta(seconds=ctx.call.seconds)
        with ctx.atomic():
            ctx.pend(wake_at=wake_at, now=now)
            ctx.timer(wake_at, "sleep")
        raise Suspend(ExecutionStatus.SLEEPING, ctx.key, wake_at)
    assert row.wake_at is not None
    if now < row.wake_at:
        ctx.timer(row.wake_at, "sleep")
        raise Suspend(ExecutionStatus.SLEEPING, ctx.key, row.wake_at)
    ctx.record()
    return StepValue(None)


RUN = Kind(StepKind.RUN, run)
SLEEP = Kind(StepKind.SLEEP, sleep)


@contextmanager
def step_savepoints() -> Iterator[None]:
    """A savepoint on each connection of this thread that is in a transaction (an
    ``atomic`` block, a ``TestCase``'s included, or autocommit off), for a ``step.run``
    function: an error rolls back what it wrote there and leaves the transaction usable
    (the step fails, as in a worker, whose connections are in autocommit), and its
    ``on_commit`` hooks go with it. Nothing in autocommit mode. A ``durable`` block in the
    function is allowed where it was without the savepoint (in a ``TestCase``, say)."""
    with ExitStack() as stack:
        for connection in connections.all(initialized_only=True):
            if connection.connection is None or not in_callers_transaction(connection):
                continue
            blocks = connection.atomic_blocks
            durable_within = not blocks or getattr(blocks[-1], "_from_testcase", False)
            savepoint = transaction.atomic(using=connection.alias)
            savepoint._from_testcase = durable_within  # type: ignore[attr-defined]
            stack.enter_context(savepoint)
        yield
