"""A caller's manual transaction on SQLite, opened the way ``transaction.atomic`` opens one.

With autocommit off (``transaction.set_autocommit(False)``, ``AUTOCOMMIT: False``) Django
issues no ``BEGIN``: ``OPTIONS["transaction_mode"]`` applies only to an ``atomic`` block
entered in autocommit. SQLite's driver then begins a deferred transaction at the first
write, and the savepoint of an ``atomic`` block begins one that the savepoint's release
commits. So a store call (or a run, a cancel) made first in such a transaction committed
on its own (a ``rollback()`` undid nothing), a registration read the store row outside the
transaction that wrote the waiter (a commit in between lost its wake), and a commit,
holding a read lock when it went to write, failed at once with "database is locked"
instead of waiting for the busy timeout. The store client's primitives, ``run_execution``
and ``cancel_execution`` call :func:`open_manual_transaction` first.
"""

from __future__ import annotations

from django.db.backends.base.base import BaseDatabaseWrapper

from .sql import queries

__all__ = ["open_manual_transaction"]


def open_manual_transaction(connection: BaseDatabaseWrapper) -> None:
    """On SQLite with autocommit off and no transaction open yet, open the caller's with
    ``BEGIN IMMEDIATE`` (``EXCLUSIVE`` if that is the configured ``transaction_mode``): it
    takes the write lock first, waiting up to the busy timeout, and stays open until the
    caller's ``commit()`` or ``rollback()``. Does nothing elsewhere (autocommit, where
    ``atomic`` begins the transaction, a transaction already open, PostgreSQL)."""
    if connection.vendor != "sqlite" or connection.get_autocommit():
        return
    if connection.connection.in_transaction:
        return
    exclusive = getattr(connection, "transaction_mode", None) == "EXCLUSIVE"
    with connection.cursor() as cursor:
        cursor.execute(
            queries.of(connection).begin_exclusive
            if exclusive
            else queries.of(connection).begin_immediate
        )
