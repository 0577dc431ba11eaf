"""A commit whose wakes are published while PostgreSQL acknowledges it.

Outside ``transaction.atomic`` a store commit is one call of the commit function. Run
plainly, its reply waits for the commit's WAL flush, and the wakes it returns can be handed
to the broker only after. :func:`call_then_commit` sends the call as a batch instead
(libpq's pipeline mode): the call, a flush request and a sync. The call runs in the
implicit transaction that the sync commits, as a plain statement does, but the flush
request makes the server answer the call before it commits, so ``during(row)`` publishes
the wakes while the server flushes; the sync's reply (the commit's) is read after. Still
one round trip, and a commit that wakes nobody costs what it did.

Why a wake that outruns its commit loses nothing: the woken run reads the store, and a read
made before the commit is visible sees the state before it. Every decision taken from such
a read is checked again under the store row's lock, which the committing transaction holds
until it ends: a take's commit finds the version moved and computes again, and a waiter
registered from an unmatched selector is compared with the committed version and woken at
once (``register_waiter``). So the worst case is one run more; in practice the commit is
flushed long before a message crosses the broker.

Only ``WAKE_BACKEND`` callables marked :func:`~yieldstar_django.wakes.enqueues_only` are
called this way: ``during`` must not use this connection, whose commit is not answered
yet. The call is prepared on connections that ask for prepared statements (psycopg's
``prepare_threshold``, Django's ``OPTIONS``), in the batch that first runs it, so the
server parses it once per connection; otherwise it is sent unprepared, as Django's default
connections send every statement (transaction-pooling PgBouncer).
"""

from __future__ import annotations

import itertools
import select
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.db.backends.base.base import BaseDatabaseWrapper

__all__ = ["call_then_commit", "supported"]

T = TypeVar("T")

#: Seconds to wait for what a failed batch still holds before closing the connection.
LEAVE_TIMEOUT = 10.0


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
) -> T:
    """Run ``statement`` (one row; ``%s`` placeholders) in its own transaction and commit
    it in one round trip, calling ``during(row)`` once the row is in and before the commit
    is answered; return what ``during`` returned.

    ``connection`` must be in autocommit mode (outside ``transaction.atomic``). An error
    of the statement rolls its transaction back and is raised, ``during`` not called. An
    error of the commit, or a connection lost before it answered, is raised after
    ``during`` ran (whatever it published was for a change that may not have committed: at
    worst a spurious wake, which is harmless); once the commit has answered, nothing more
    is read, so a connection that fails then is not reported as a failed commit. Errors
    are Django's, as for any query.
    """
    connection.ensure_connection()
    with connection.wrap_database_errors:
        raw = connection.connection
        with raw.lock:
            try:
                return _batch(raw, statement, params, during)
            except _Unprepared:
                # Deallocated behind our back (psycopg's DEALLOCATE ALL after it dropped
                # its own, a DISCARD ALL): nothing ran; prepare it again.
                return _batch(raw, statement, params, during)


class _Unprepared(Exception):
    """The batch named a prepared statement the server no longer has (nothing ran)."""


def _batch(
    raw: Any, statement: str, params: Sequence[Any], during: Callable[[tuple[Any, ...]], T]
) -> T:
    """The batch, on the psycopg connection ``raw`` (its lock held)."""
    from psycopg.adapt import PyFormat, Transformer

    pgconn = raw.pgconn
    transformer = Transformer(raw)
    values = transformer.dump_sequence(params, [PyFormat.AUTO] * len(params))
    key = (statement, tuple(transformer.types or ()))
    name, prepare = _prepared_name(raw, key)
    pgconn.enter_pipeline_mode()
    try:
        if name is None:
            pgconn.send_query_params(
                _numbered(statement),
                values,
                param_types=transformer.types,
                param_formats=transformer.formats,
            )
        else:
            if prepare:
                pgconn.send_prepare(name, _numbered(statement), param_types=transformer.types)
            pgconn.send_query_prepared(name, values, param_formats=transformer.formats)
        pgconn.send_flush_request()  # the call's reply before the commit's flush
        pgconn.pipeline_sync()  # ends the implicit transaction: commits it
        while pgconn.flush():  # 1: some of it is still to send
            select.select([pgconn.socket], [pgconn.socket], [])
            pgconn.consume_input()
        if prepare:
            try:
                _check(_next(pgconn), raw)
            except Exception:
                _forget(raw, key)  # not prepared: prepare it next time
                raise
        try:
            (reply,) = _check(_next(pgconn), raw)
        except Exception as exc:
            if name is not None and getattr(exc, "sqlstate", None) == _NO_SUCH_STATEMENT:
                _forget(raw, key)
                raise _Unprepared(name.decode()) from exc
            raise
        transformer.set_pgresult(reply)
        row = transformer.load_row(0, tuple)
        assert row is not None, "the commit function returns one row"
        try:
            result = during(row)
        finally:
            _read_commit(pgconn, raw)
    finally:
        _leave_pipeline(pgconn)
    return result


def _numbered(statement: str) -> bytes:
    """``statement`` with its ``%s`` placeholders numbered (``$1``, ``$2``, ...)."""
    numbered = _statements.get(statement)
    if numbered is None:
        parts = statement.split("%s")
        text = parts[0] + "".join(f"${n}{part}" for n, part in enumerate(parts[1:], 1))
        numbered = _statements[statement] = text.encode()
    return numbered


_statements: dict[str, bytes] = {}

#: SQLSTATE invalid_sql_statement_name: executing a prepared statement that is not there.
_NO_SUCH_STATEMENT = "26000"


#: A statement and its parameter types: what one prepared name stands for.
_Key = tuple[str, tuple[int, ...]]


def _prepared_name(raw: Any, key: _Key) -> tuple[bytes | None, bool]:
    """The name ``key`` is prepared under on ``raw``, and whether the batch must prepare it
    first; ``(None, False)``: send it unprepared (the connection's ``prepare_threshold`` is
    ``None``)."""
    if raw.prepare_threshold is None:
        return None, False
    names: dict[_Key, bytes] = raw.__dict__.setdefault("_yieldstar_prepared", {})
    name = names.get(key)
    if name is not None:
        return name, False
    name = names[key] = f"_yieldstar_overlap_{next(_names)}".encode()
    return name, True


_names = itertools.count()


def _forget(raw: Any, key: _Key) -> None:
    """Prepare ``key`` again next time (the server does not have it)."""
    raw.__dict__.get("_yieldstar_prepared", {}).pop(key, None)


def _wait_result(pgconn: Any) -> Any:
    """The next result of the batch (``None`` ends a statement's results)."""
    while pgconn.is_busy():  # read only while a result is incomplete
        select.select([pgconn.socket], [], [])
        pgconn.consume_input()
    return pgconn.get_result()


def _next(pgconn: Any) -> list[Any]:
    """The results of the batch's next statement."""
    results = []
    while (result := _wait_result(pgconn)) is not None:
        results.append(result)
    return results


def _check(results: list[Any], raw: Any) -> list[Any]:
    """``results``, or the error one of them reports, raised as psycopg's."""
    from psycopg import errors, pq

    for result in results:
        if result.status == pq.ExecStatus.FATAL_ERROR:
            raise errors.error_from_result(result, encoding=raw.info.encoding)
    return results


def _read_commit(pgconn: Any, raw: Any) -> None:
    """Read the sync's reply, the commit's; raise the error it reports (an error at commit
    time, or the connection lost before the commit answered)."""
    from psycopg import pq

    while (result := _wait_result(pgconn)) is None or (
        result.status != pq.ExecStatus.PIPELINE_SYNC
    ):
        if result is not None:
            _check([result], raw)


def _leave_pipeline(pgconn: Any) -> None:
    """Leave pipeline mode, first reading what the batch still holds after an error
    (waiting at most ``LEAVE_TIMEOUT`` for it). A connection that cannot leave it is closed, so that
    its next use fails instead of waiting for results that will not come."""
    from psycopg import pq

    for _ in range(64):  # a handful of results at most
        if pgconn.pipeline_status == pq.PipelineStatus.OFF:
            return
        try:
            pgconn.exit_pipeline_mode()  # refused while results are pending
            return
        except Exception:
            pass
        try:
            if not pgconn.is_busy():
                pgconn.get_result()
            elif select.select([pgconn.socket], [], [], LEAVE_TIMEOUT)[0]:
                pgconn.consume_input()
            else:
                break
        except Exception:
            break
    pgconn.finish()
