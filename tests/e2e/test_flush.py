"""The test database's flush after an end-to-end test wins a deadlock against a worker.

pytest-django flushes the test database after each of these tests (a ``TRUNCATE`` of every
table) while the module's workers keep running; a resume still going can hold a lock the
flush waits for and then wait for one the flush holds. ``_flush_wins_deadlocks`` (the
e2e conftest) makes PostgreSQL break that deadlock in the worker's session.
"""

from __future__ import annotations

import re
import threading

import psycopg
import pytest
from django.core.management import call_command
from django.core.management.color import no_style
from django.core.management.sql import sql_flush
from django.db import connection

from tests.connections import second_connection
from tests.polling import join_or_fail, wait_until

from .conftest import FLUSH_DEADLOCK_TIMEOUT

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _flushed_tables() -> tuple[str, str]:
    """The first and last tables of the flush's ``TRUNCATE``, which locks them in that
    order (an order that varies between processes: Django lists the tables from a set)."""
    truncate = next(s for s in sql_flush(no_style(), connection) if s.startswith("TRUNCATE"))
    tables = re.findall(r'"([^"]+)"', truncate)
    return tables[0], tables[-1]


def test_the_flush_survives_a_deadlock_with_a_running_worker() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SHOW deadlock_timeout")
        assert cursor.fetchone()[0] == FLUSH_DEADLOCK_TIMEOUT
    worker = second_connection(autocommit=False)  # as a worker's, in a transaction
    watcher = second_connection()
    outcome: list[BaseException | None] = []

    def flush_waits() -> bool:
        """The flush holds the tables before the worker's and waits for that one."""
        row = watcher.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query LIKE 'TRUNCATE%%'"
        ).fetchone()
        return row is not None and row[0] > 0

    def run_on() -> None:
        """The worker's next statement, once the flush waits for its lock."""
        try:
            wait_until("the flush to wait for the worker's lock", flush_waits, 30)
            worker.execute(f'SELECT count(*) FROM "{first}"')  # a table the flush holds
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)
        finally:
            worker.rollback()  # as a failed task does: its locks go (the flush goes on)

    first, last = _flushed_tables()
    try:
        # The worker holds a lock on the last table the flush will lock.
        worker.execute(f'LOCK TABLE "{last}" IN ROW EXCLUSIVE MODE')
        thread = threading.Thread(target=run_on)
        thread.start()
        try:
            call_command("flush", interactive=False, verbosity=0)  # this test's connection
        finally:
            join_or_fail(thread, what="the thread")
    finally:
        worker.close()
        watcher.close()
    assert len(outcome) == 1
    assert isinstance(outcome[0], psycopg.errors.DeadlockDetected)
