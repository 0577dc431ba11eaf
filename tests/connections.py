"""A second connection to a test database, outside Django: psycopg with the server's
defaults, as another process (a worker, a second client) would open one; and a wait until
another connection waits for a lock."""

from __future__ import annotations

import os
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.db import connections

from tests.polling import wait_until


def pooled() -> bool:
    """Whether the suite reaches PostgreSQL through a transaction pooler
    (``YIELDSTAR_TEST_POOLER``, ``tests.settings.POOLER``)."""
    return getattr(settings, "POOLER", None) == "transaction"


#: For a test that needs one client connection to be one PostgreSQL backend: it kills or
#: watches a connection's backend by its pid (behind a transaction pooler the client's pid
#: is the pooler's, and each transaction may run on another backend), or prepares
#: statements. Skipped when the suite runs through a transaction pooler.
DIRECT = pytest.mark.skipif(
    os.environ.get("YIELDSTAR_TEST_POOLER") == "transaction",
    reason="needs a direct connection: one client connection, one backend (its pid)",
)


def second_connection(
    alias: str = "default", *, autocommit: bool = True
) -> psycopg.Connection[Any]:
    """A new connection to the database of ``alias`` (its test database during tests)."""
    s = connections[alias].settings_dict
    return psycopg.connect(
        dbname=s["NAME"],
        user=s["USER"] or None,
        password=s["PASSWORD"] or None,
        host=s["HOST"] or None,
        port=s["PORT"] or None,
        autocommit=autocommit,
    )


def await_lock_wait(
    pid: list[int], who: str, watcher: psycopg.Connection[Any] | None = None
) -> None:
    """Wait until the PostgreSQL backend whose id ``pid`` holds (once the thread that owns
    it put it there) waits for a lock (through a transaction pooler: any backend of the
    database), as ``watcher`` (a second connection of the default
    database if none) sees it; fail naming ``who`` after ``HANG_SECONDS``."""
    if watcher is None:
        with second_connection() as own:
            return await_lock_wait(pid, who, own)

    def waits() -> bool:
        assert watcher is not None
        if pooled():
            # Behind a transaction pooler the pid a thread read in one transaction need not
            # be its next one's: any backend of the test database waiting for a lock.
            return bool(
                watcher.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock'"
                ).fetchone()
            )
        row = watcher.execute(
            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", pid[:1] or [0]
        ).fetchone()
        return row is not None and row[0] == "Lock"

    wait_until(f"{who} to wait for a lock", waits, interval=0.01)
