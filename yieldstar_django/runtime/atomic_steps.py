"""``step.atomic``: a function's database writes committed with the step's heap row.

The function runs inside one transaction on the heap's database (``DATABASE_ALIAS``), and
the step's ``completed`` row is written at its end, in that transaction, by the lease-fenced
statement every heap write uses: the row is inserted only while the run holds the lease of
a live execution, and at most one row per (execution, step key) ever commits (a second
insert waits for the first's transaction, then inserts nothing). A row not written raises
``LeaseLost`` inside the transaction, which rolls it back, and the function's writes with
it. So the writes of the function commit exactly once, however often it ran: a run that
lost its lease (a worker paused past it, then taken over) or lost the race to another run
of the step commits nothing.

An error of the function rolls the transaction back and is settled as ``step.run``'s
(``RetryableError`` retried on a durable timer, any other recorded as the step's error),
after the rollback. ``OperationalError`` and ``InterfaceError`` end the transaction itself
(the connection lost, a deadlock, a lock timeout): nothing is recorded and the run ends,
to run the step again later (``context.LET_THROUGH``); a ``StoreContentionError`` (a store
call of the function that lost ``CAS_MAX_ATTEMPTS`` races) runs it again a second later,
as for a store step (``ctx.contended()``). While the function runs, a
statement that writes through another database alias is refused
(:func:`other_databases_refused`), since it could not commit with the step.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from django.db import InterfaceError, OperationalError, connections

from ..core.durable import decode_durable
from ..core.errors import StoreContentionError
from ..models.runtime import StepKind
from .context import Kind, StepContext
from .errors import CrossDatabaseWriteError
from .outcomes import NOT_RECORDED, StepResult, StepValue
from .plain_steps import attempt_due, encode_result, retry_or_fail

__all__ = ["ATOMIC", "is_write", "other_databases_refused"]

#: Errors of the function that are the transaction's failure, not the function's: let
#: through unrecorded (the run ends; the step runs again in a later run).
TRANSACTION_FAILURES: tuple[type[BaseException], ...] = (OperationalError, InterfaceError)
#: Errors of the function settled as a store step's (``context.run_step``): a store call
#: that lost too many races runs the step again a second later (``ctx.contended()``).
SETTLED_AS_STORE_STEPS: tuple[type[BaseException], ...] = (StoreContentionError,)


def atomic(ctx: StepContext) -> StepResult:
    """Run the step's function and record its result in one transaction (see the module
    doc)."""
    call = ctx.call
    attempts = attempt_due(ctx)
    assert call.fn is not None
    failure: BaseException | None = None
    try:
        with ctx.atomic():
            try:
                with other_databases_refused(ctx.alias):
                    value = call.fn(*call.args, **call.kwargs)
                encoded = encode_result(ctx, value)
            except BaseException as exc:
                failure = exc
                raise
            ctx.record(encoded, attempts=attempts)
    except BaseException as exc:
        if exc is not failure or isinstance(
            exc, NOT_RECORDED + TRANSACTION_FAILURES + SETTLED_AS_STORE_STEPS
        ):
            raise  # the runtime's own (the lease lost, the commit failed), a stop, contention
        return retry_or_fail(ctx, exc, attempts)
    return StepValue(decode_durable(encoded))


ATOMIC = Kind(StepKind.ATOMIC, atomic)


# -- writes through other aliases -----------------------------------------------------------


@contextmanager
def other_databases_refused(alias: str) -> Iterator[None]:
    """While inside, a statement that writes (:func:`is_write`) through any database
    alias but ``alias``, on this thread, raises ``CrossDatabaseWriteError`` before it is
    sent. Reads go through. A Django ``execute_wrapper`` on each other alias's connection
    (created, not opened, if it was not yet)."""
    with ExitStack() as stack:
        for other in connections:
            if other != alias:
                stack.enter_context(connections[other].execute_wrapper(_Refuse(other, alias)))
        yield


class _Refuse:
    """The ``execute_wrapper`` of one alias: refuse writes, pass reads on."""

    __slots__ = ("alias", "step_alias")

    def __init__(self, alias: str, step_alias: str) -> None:
        self.alias = alias
        self.step_alias = step_alias

    def __call__(
        self,
        execute: Callable[..., Any],
        sql: Any,
        params: Any,
        many: bool,
        context: dict[str, Any],
    ) -> Any:
        if is_write(sql):
            text = " ".join(str(sql).split())
            head = text if len(text) <= 120 else text[:117] + "..."
            raise CrossDatabaseWriteError(self.alias, self.step_alias, head)
        return execute(sql, params, many, context)


#: First keywords of statements that write nothing (transaction control included).
_READS = frozenset(
    {
        "SELECT",
        "VALUES",
        "SHOW",
        "EXPLAIN",
        "BEGIN",
        "START",
        "SAVEPOINT",
        "RELEASE",
        "ROLLBACK",
        "COMMIT",
        "END",
        "SET",
        "RESET",
        "DECLARE",
        "FETCH",
        "MOVE",
        "CLOSE",
    }
)
#: String literals, quoted identifiers and comments: what a keyword search skips.
_SKIPPED = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|`[^`]*`|--[^\n]*|/\*.*?\*/", re.S)
_FIRST_WORD = re.compile(r"[\s(]*([A-Za-z]+)")
_LOCKING = re.compile(r"\bFOR\s+(?:NO\s+KEY\s+)?UPDATE\b", re.I)
_MODIFYING = re.compile(r"\b(?:INSERT|UPDATE|DELETE|MERGE|UPSERT|REPLACE)\b", re.I)


def is_write(sql: object) -> bool:
    """Whether the statement ``sql`` may write: anything but a read (``SELECT``,
    ``VALUES``, ``SHOW``, ``EXPLAIN``, transaction control, ``SET``), a ``WITH`` query
    holding an ``INSERT``, ``UPDATE``, ``DELETE`` or ``MERGE``, and a ``PRAGMA`` that
    assigns. A statement that is not text (a composed one) counts as a write."""
    if isinstance(sql, bytes):
        sql = sql.decode(errors="replace")
    if not isinstance(sql, str):
        return True
    text = _SKIPPED.sub(" ", sql)
    first = _FIRST_WORD.match(text)
    if first is None:
        return False  # empty, or only comments
    word = first.group(1).upper()
    if word == "WITH":
        return _MODIFYING.search(_LOCKING.sub(" ", text)) is not None
    if word == "PRAGMA":
        return "=" in text
    return word not in _READS
