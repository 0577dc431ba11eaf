"""The store's queue: a write that lost ``CAS_QUEUE_AFTER`` compare-and-swap races makes its
next attempt in a transaction that first locks the store row (``core/retries.py``).

Writers waiting for a row lock are served in order, and a commit that computed from the
row before the lock was taken loses once it gets it, so the attempt made under the lock
cannot lose: a write queues at most once, and no write loses without end. The transaction
spans that one attempt (its user code included, the only place it runs while a row lock is
held); it is taken only outside ``transaction.atomic``, so the session holds no other lock.

A claim that removes several waiters of its execution (a ``take_any``'s, the commit hook's
``unwait``) locks them before the store row, in the order of its commit
(``yieldstar_commit_mutation_v4``, :func:`.portable.commit_mutation`): a transaction that
woke one of them holds its row and may next ask for this store's row. Taking the store row
first, the queued claim deadlocked with it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from ..sql import queries
from .portable import lock_waiters, read_locked

__all__ = ["store_queue"]


@contextlib.contextmanager
def store_queue(
    connection: BaseDatabaseWrapper,
    using: str,
    name: str,
    id: str,
    execution_id: str = "",
    unwait: Sequence[str] = (),
) -> Iterator[None]:
    """The queue's transaction on store ``(name, id)``: the waiters of the ``unwait`` step
    keys of ``execution_id`` locked first when there are several, then the store row."""
    with transaction.atomic(using=using):
        with connection.cursor() as cursor:
            if len(unwait) > 1:  # before the store's row, as the commit takes them
                lock_waiters(cursor, connection, execution_id, unwait)
            read_locked(cursor, queries.of(connection).read_store_row_for_commit, name, id)
        yield
