"""The relay's upkeep that analyzes tables grown past their planner statistics
(``yieldstar_django.analyze``), on PostgreSQL with rows written by another connection."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection

from tests.connections import second_connection
from tests.polling import wait_until
from yieldstar_django.analyze import GROWTH_ROWS, analyze_grown_tables
from yieldstar_django.wakes.relay import _round_tasks

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

TABLE = "yieldstar_wakeintent"


@pytest.fixture(autouse=True)
def postgres_only() -> Iterator[None]:
    if connection.vendor != "postgresql":
        pytest.skip("planner statistics and ANALYZE are PostgreSQL's")
    with connection.cursor() as cursor:
        # Small on disk too: an earlier test's rows, deleted, leave their pages behind.
        cursor.execute(f"TRUNCATE {TABLE}")
        cursor.execute(f"ANALYZE {TABLE}")
    yield


def insert_intents(count: int) -> None:
    """Commit ``count`` intents from a connection of its own, then wait until its
    statistics reach the server's counters (a backend reports them as it exits)."""
    before = changed()
    with second_connection() as other:
        other.execute(
            f"INSERT INTO {TABLE} (execution_id, workflow_id, reason, available_at, attempts,"
            " last_error, created_at) SELECT 'e' || g, 'wf', 'store', now(), 0, '', now()"
            " FROM generate_series(1, %s) AS g",
            [count],
        )
    wait_until("the other connection's statistics", lambda: changed() >= before + count)


def changed() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT n_mod_since_analyze FROM pg_stat_user_tables WHERE relid = %s::regclass",
            [TABLE],
        )
        return int(cursor.fetchone()[0])


def test_a_table_is_analyzed_once_it_outgrows_its_statistics() -> None:
    assert analyze_grown_tables in _round_tasks  # the relay runs it every round
    insert_intents(GROWTH_ROWS // 2)
    assert TABLE not in analyze_grown_tables("default")
    insert_intents(GROWTH_ROWS)
    assert TABLE in analyze_grown_tables("default")
    assert changed() == 0
    # Analyzed with 1,500 rows: it takes GROWTH_ROWS changes more than that to go again.
    insert_intents(1_500 + GROWTH_ROWS - 100)
    assert TABLE not in analyze_grown_tables("default")
    insert_intents(200)
    assert TABLE in analyze_grown_tables("default")


def test_the_plans_a_connection_cached_on_a_small_table_are_made_again() -> None:
    """A statement prepared while the table was small keeps its sequential scan after a
    burst, until the upkeep analyzes the table."""

    def plan() -> str:
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN EXECUTE yieldstar_test_intents('e1')")
            return "\n".join(row[0] for row in cursor.fetchall())

    with connection.cursor() as cursor:
        cursor.execute("SET plan_cache_mode = force_generic_plan")
        cursor.execute(
            f"PREPARE yieldstar_test_intents (text) AS SELECT id FROM {TABLE}"
            " WHERE execution_id = $1"
        )
    try:
        assert "Seq Scan" in plan()
        insert_intents(20_000)
        assert "Seq Scan" in plan()  # the cached plan does not see the burst
        assert TABLE in analyze_grown_tables("default")
        assert "Index" in plan() and "Seq Scan" not in plan()
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DEALLOCATE yieldstar_test_intents")
            cursor.execute("RESET plan_cache_mode")
