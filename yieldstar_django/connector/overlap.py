"""A commit whose wakes are published while PostgreSQL acknowledges it.

Outside ``transaction.atomic`` a store commit is one call of the commit function. Run
plainly, its wakes can be handed to the broker only once the reply is back, and that reply
waits for the commit's WAL flush. :func:`call_then_commit` runs the call in an explicit
transaction instead: ``BEGIN`` and the call in one round trip (a pipeline), then ``COMMIT``
sent without waiting for its reply; the caller's ``during(row)`` publishes the wakes the
call returned while the server flushes, and the reply is read after it.

Why a wake that outruns its commit loses nothing: the woken run reads the store, and a read
made before the commit is visible sees the state before it. Every decision taken from such
a read is checked again under the store row's lock, which the committing transaction holds
until it ends: a take's commit finds the version moved and computes again, and a waiter
registered from an unmatched selector is compared with the committed version and woken at
once (``register_waiter``). So the worst case is one run more; in practice the commit is
flushed long before a message crosses the broker.

Only ``WAKE_BACKEND`` callables marked :func:`~yieldstar_django.wakes.enqueues_only` are
called this way: ``during`` must not use this connection, whose ``COMMIT`` reply is still
unread.
"""

from __future__ import annotations

import select
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.db.backends.base.base import BaseDatabaseWrapper

from .cursors import server_cursor

__all__ = ["call_then_commit", "supported"]

T = TypeVar("T")


def supported(connection: BaseDatabaseWrapper) -> bool:
    """Whether ``connection`` can overlap a commit: PostgreSQL through a libpq with
    pipeline mode (14 or later; psycopg's binary package ships one)."""
    if connection.vendor != "postgresql":
        return False
    import psycopg

    return bool(psycopg.Pipeline.is_supported())


def call_then_commit(
    connection: BaseDatabaseWrapper,
    statement: str,
    params: Sequence[Any],
    during: Callable[[tuple[Any, ...]], T],
) -> tuple[tuple[Any, ...], T]:
    """Run ``statement`` (one row) in its own transaction and commit it, calling
    ``during(row)`` between sending ``COMMIT`` and reading its reply.

    ``connection`` must be in autocommit mode (outside ``transaction.atomic``). An error
    of the statement rolls the transaction back and is raised, ``during`` not called. An
    error of the ``COMMIT`` is raised after ``during`` ran (whatever it published was for
    a change that may not have committed: a spurious wake, which is harmless). Errors are
    Django's, as for any query.
    """
    connection.ensure_connection()
    with connection.wrap_database_errors:
        raw = connection.connection
        cursor = server_cursor(connection)
        try:
            with raw.pipeline():
                cursor.execute("BEGIN")
                cursor.execute(statement, params)
            row = cursor.fetchone()
        except BaseException:
            _roll_back(raw)
            raise
        assert row is not None, "the commit function returns one row"
        pgconn = raw.pgconn
        pgconn.send_query(b"COMMIT")
        while pgconn.flush():  # 1: some of it is still to send
            select.select([], [pgconn.socket], [])
        try:
            result = during(row)
        finally:
            _read_reply(raw)
    return row, result


def _read_reply(raw: Any) -> None:
    """Read the reply of the ``COMMIT`` in flight; raise the error it reports.

    Once ``COMMIT`` has answered, the change is committed: a connection that fails after
    that (terminated, say) is left for its next use to report, never reported as a failed
    commit (the caller would then retry a change that is already there)."""
    from psycopg import errors, pq

    pgconn = raw.pgconn
    failed = None
    committed = False
    while True:
        try:
            while pgconn.is_busy():  # read only while a result is incomplete
                select.select([pgconn.socket], [], [])
                pgconn.consume_input()
        except errors.OperationalError:
            if committed:
                return
            raise
        result = pgconn.get_result()
        if result is None:
            break
        if result.status == pq.ExecStatus.COMMAND_OK:
            committed = failed is None
        elif failed is None:
            failed = result
    if failed is not None:
        sqlstate = failed.error_field(pq.DiagnosticField.SQLSTATE)
        message = (failed.error_message or b"COMMIT failed").decode(errors="replace")
        error = errors.lookup(sqlstate.decode()) if sqlstate else errors.OperationalError
        raise error(message.strip())


def _roll_back(raw: Any) -> None:
    """End a transaction left open or failed by an error, as psycopg does (which also
    forgets statements it may have prepared in the failed pipeline); best effort: the
    connection may be what failed."""
    try:
        raw.rollback()
    except Exception:
        pass  # the original error is the one raised
