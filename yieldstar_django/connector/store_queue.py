"""The store's queue: a write that lost ``CAS_QUEUE_AFTER`` compare-and-swap races makes its
next attempt in a transaction that first locks the store row (``core/retries.py``).

Writers waiting for a row lock are served in order, and a commit that computed from the
row before the lock was taken loses once it gets it, so the attempt made under the lock
cannot lose: a write queues at most once, and no write loses without end. The transaction
spans that one attempt (its user code included, the only place it runs while a row lock is
held); it is taken only outside ``transaction.atomic``, so the session holds no other lock.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from .portable import read_locked

__all__ = ["store_queue"]


@contextlib.contextmanager
def store_queue(connection: BaseDatabaseWrapper, using: str, name: str, id: str) -> Iterator[None]:
    with transaction.atomic(using=using):
        with connection.cursor() as cursor:
            read_locked(cursor, connection, name, id, "NO KEY UPDATE")
        yield
