"""One statement of the hot path, one round trip: server-side binding on PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

from django.db.backends.base.base import BaseDatabaseWrapper

__all__ = ["execute", "fetchall", "fetchone"]


def fetchone(
    connection: BaseDatabaseWrapper, sql: str, params: Sequence[Any]
) -> tuple[Any, ...] | None:
    """Run one statement and return its first row.

    On PostgreSQL this binds the parameters on the server (the extended protocol, one round
    trip, no quoting in Python), prepared only if the connection's
    ``OPTIONS["prepare_threshold"]`` asks for it (Django's default keeps it off for
    connection poolers); errors are Django's as usual. With query logging on (``DEBUG``,
    ``CaptureQueriesContext``) or an ``execute_wrapper`` installed, it goes through Django's
    cursor, so the statement is seen as any other.
    """
    return cast(tuple[Any, ...] | None, _run(connection, sql, params, lambda c: c.fetchone()))


def execute(connection: BaseDatabaseWrapper, sql: str, params: Sequence[Any]) -> int:
    """Run one statement as :func:`fetchone` does and return its row count."""
    return int(_run(connection, sql, params, lambda c: c.rowcount))


def fetchall(
    connection: BaseDatabaseWrapper, sql: str, params: Sequence[Any], *, binary: bool = False
) -> list[tuple[Any, ...]]:
    """Run one statement as :func:`fetchone` does and return all its rows, on PostgreSQL
    through a cursor of its own, closed before it returns: libpq's result, which holds
    every row, is freed then, not kept until the next statement as :func:`fetchone`'s
    cursor keeps its own. ``binary``: the rows in binary format there (a ``bytea`` as its
    bytes, not twice as many hexadecimal digits)."""
    if _through_django(connection):
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return [tuple(row) for row in cursor.fetchall()]
    import psycopg

    connection.ensure_connection()
    connection.validate_no_broken_transaction()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(sql, params, binary=binary)
        return cursor.fetchall()


def _run(
    connection: BaseDatabaseWrapper, sql: str, params: Sequence[Any], result: Callable[[Any], Any]
) -> Any:
    if _through_django(connection):
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return result(cursor)
    connection.ensure_connection()
    connection.validate_no_broken_transaction()
    with connection.wrap_database_errors:
        cursor = _server_cursor(connection)
        cursor.execute(sql, params)
        return result(cursor)


def _through_django(connection: BaseDatabaseWrapper) -> bool:
    """Whether a statement goes through Django's cursor: on databases other than
    PostgreSQL, and where Django must see it (queries logged, execute wrappers)."""
    return bool(
        connection.vendor != "postgresql"
        or connection.queries_logged
        or connection.execute_wrappers
    )


def _server_cursor(connection: BaseDatabaseWrapper) -> Any:
    """A server-binding psycopg cursor on ``connection``'s current psycopg connection,
    kept on the wrapper (which belongs to one thread) and replaced after a reconnection."""
    import psycopg  # only PostgreSQL reaches here; SQLite installs need no psycopg

    raw = connection.connection
    cached = getattr(connection, "_yieldstar_cursor", None)
    if cached is None or cached[0] is not raw or cached[1].closed:
        cached = (raw, psycopg.Cursor(raw))
        connection._yieldstar_cursor = cached  # type: ignore[attr-defined]
    return cached[1]
