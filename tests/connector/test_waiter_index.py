"""100,000 waiters on one store: a mutation finds the one it wakes through the index.

No timings: PostgreSQL's not-yet-reported table statistics (``pg_stat_xact_user_tables``,
compared before and after one commit) show that the commit read the waiter-path table by
index only (no sequential scan, a handful of rows), and the plans of
the portable matching query (EXPLAIN) use the ``(store_pk, kind, path)`` index on both
databases.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from django.db import connections, transaction

from bench.waiter_rows import insert_waiters
from tests.connections import second_connection
from tests.shared.fixtures import POSTGRES, WakeCollector
from yieldstar_django.connector import DatabaseStoreClient, matching_waiters_sql
from yieldstar_django.core.definition import StoreDefinition
from yieldstar_django.core.results import Wake
from yieldstar_django.core.waiter_index import path_key, path_match

WAITERS = 100_000
_names = itertools.count()


def add_waiters(alias: str, store_pk: int, instance_id: str, count: int) -> None:
    """Waiter ``e<i>`` reads ``("jobs", i, "status")`` (``bench.waiter_rows``), then
    ``ANALYZE``."""
    assert path_key(("jobs", 7, "status")) == '["jobs",7,"status"]'
    with connections[alias].cursor() as cursor:
        insert_waiters(cursor.execute, store_pk, instance_id, count)
        for table in ("yieldstar_waiter", "yieldstar_waiterpath"):
            cursor.execute(f"ANALYZE {table}")


def jobs_store(prefix: str) -> StoreDefinition:
    """A store definition of ten jobs and a field no waiter reads."""
    return StoreDefinition(
        f"{prefix}{next(_names)}",
        None,
        lambda id: {"jobs": [{"status": "new"} for _ in range(10)], "other": 0},
    )


def primary_key(alias: str, d: StoreDefinition) -> int:
    """The primary key of store ``q`` of ``d``."""
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT id FROM yieldstar_storeinstance WHERE name = %s AND store_id = %s",
            [d.name, "q"],
        )
        return int(cursor.fetchone()[0])


def setup_store(alias: str) -> tuple[StoreDefinition, DatabaseStoreClient, int]:
    d = jobs_store("many")
    client = DatabaseStoreClient(alias)
    snapshot = client.get_store(d, "q")
    pk = primary_key(alias, d)
    add_waiters(alias, pk, snapshot.instance_id, WAITERS)
    return d, client, pk


def matching_plan(alias: str, store_pk: int) -> str:
    """The plan of the portable query matching the waiters of ``jobs[5].status``."""
    sql, params = matching_waiters_sql(store_pk, path_match([("jobs", 5, "status")]))
    with connections[alias].cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def waiter_path_stats(alias: str) -> dict[str, Any]:
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT seq_scan, idx_scan, idx_tup_fetch FROM pg_stat_xact_user_tables "
            "WHERE relname = 'yieldstar_waiterpath'"
        )
        seq_scan, idx_scan, fetched = cursor.fetchone()
    return {"seq_scan": seq_scan, "idx_scan": idx_scan, "idx_tup_fetch": fetched}


def registered_again(alias: str, *executions: str) -> None:
    """As if ``executions`` had run their step and registered their waiters again: a
    waiter is woken once per registration."""
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "UPDATE yieldstar_waiter SET woken_at = NULL WHERE execution_id IN "
            f"({', '.join(['%s'] * len(executions))}) AND woken_at IS NOT NULL",
            list(executions),
        )


@pytest.mark.slow
@pytest.mark.parametrize("alias", [POSTGRES], indirect=True)
def test_matching_reads_the_waiter_index_only_on_postgres(alias: str, wakes: WakeCollector) -> None:
    d, _, store_pk = setup_store(alias)
    for use_functions in (True, False):
        wakes.clear()
        registered_again(alias, "e5")
        client = DatabaseStoreClient(alias, use_functions=use_functions)
        with transaction.atomic(using=alias):
            before = waiter_path_stats(alias)
            client.update_store(d, "q", updater=lambda s: s["jobs"][5].update(status="done"))
            after = waiter_path_stats(alias)
        used = {key: after[key] - before[key] for key in after}
        assert used["seq_scan"] == 0, (use_functions, used)
        assert used["idx_scan"] >= 1, (use_functions, used)
        assert used["idx_tup_fetch"] < 10, (use_functions, used)
        assert wakes == [Wake("e5", "wf")], "exactly the waiter of the changed item"

        with transaction.atomic(using=alias):
            before = waiter_path_stats(alias)
            client.update_store(d, "q", updater=lambda s: s.update(other=s["other"] + 1))
            assert waiter_path_stats(alias)["seq_scan"] == before["seq_scan"]
        assert wakes == [Wake("e5", "wf")], "a disjoint change wakes none of 100,000"

    plan = matching_plan(alias, store_pk)
    assert "yieldstar_waiterpath_match" in plan, plan
    assert "Seq Scan on yieldstar_waiterpath" not in plan, plan


@pytest.mark.slow
@pytest.mark.django_db(transaction=True, databases=["sqlite"])
def test_matching_uses_the_waiter_index_on_sqlite(wakes: WakeCollector) -> None:
    alias = "sqlite"
    d, client, store_pk = setup_store(alias)
    sql, params = matching_waiters_sql(store_pk, path_match([("jobs", 5, "status")]))
    with connections[alias].cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        plan = [row[-1] for row in cursor.fetchall()]
    on_paths = [step for step in plan if "yieldstar_waiterpath" in step]
    assert on_paths and all("INDEX yieldstar_waiterpath_match" in s for s in on_paths), plan
    client.update_store(d, "q", updater=lambda s: s["jobs"][5].update(status="done"))
    assert wakes == [Wake("e5", "wf")]
    client.update_store(d, "q", updater=lambda s: s.update(other=1))
    assert wakes == [Wake("e5", "wf")]


def burst_from_another_connection(alias: str, store_pk: int, instance_id: str, count: int) -> None:
    """``add_waiters`` from a connection of its own, without ``ANALYZE``."""
    with second_connection(alias) as conn, conn.transaction():
        insert_waiters(conn.execute, store_pk, instance_id, count)


def table_reads(alias: str) -> dict[str, tuple[int, int]]:
    """(sequential scans, rows fetched by index) of the waiter tables in this transaction."""
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT relname, seq_scan, idx_tup_fetch FROM pg_stat_xact_user_tables "
            "WHERE relname IN ('yieldstar_waiter', 'yieldstar_waiterpath')"
        )
        return {name: (int(seq), int(fetched)) for name, seq, fetched in cursor.fetchall()}


@pytest.mark.slow
@pytest.mark.parametrize("alias", [POSTGRES], indirect=True)
def test_a_burst_without_analyze_is_matched_by_index_on_a_warm_connection(
    alias: str, wakes: WakeCollector
) -> None:
    """20,000 waiters registered in a burst by another connection after this connection
    cached its plans on empty, freshly analyzed waiter tables (a fan-out on a fresh
    database), no ``ANALYZE`` since: both commit paths still read the waiter tables by index
    only, a handful of rows, and wake exactly the waiters whose paths intersect."""
    count = 20_000
    with connections[alias].cursor() as cursor:
        for table in ("yieldstar_waiter", "yieldstar_waiterpath"):
            cursor.execute(f"VACUUM ANALYZE {table}")  # statistics of empty tables
    d = jobs_store("burst")
    clients = [DatabaseStoreClient(alias, use_functions=f) for f in (True, False)]
    snapshot = clients[0].get_store(d, "q")
    for _ in range(8):  # past PostgreSQL's five custom plans: the generic ones are cached
        for client in clients:
            client.update_store(d, "q", updater=lambda s: s.update(other=s["other"] + 1))
            client.update_store(d, "q", updater=lambda s: s["jobs"][5].update(status="new"))
    store_pk = primary_key(alias, d)
    burst_from_another_connection(alias, store_pk, snapshot.instance_id, count)
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE relname = 'yieldstar_waiterpath'")
        assert cursor.fetchone()[0] <= 0, "the statistics still say empty"
    assert wakes == []

    changes = [
        (lambda s: s["jobs"][5].update(status="done"), [Wake("e5", "wf")]),
        (lambda s: s.update(other=s["other"] + 1), []),
        (lambda s: s["jobs"].__setitem__(7, {"status": "x"}), [Wake("e7", "wf")]),
        (lambda s: s["jobs"][5].update(status="new"), [Wake("e5", "wf")]),
    ]
    for client in clients:
        for change, woken in changes:
            wakes.clear()
            registered_again(alias, "e5", "e7")
            with transaction.atomic(using=alias):
                before = table_reads(alias)
                client.update_store(d, "q", updater=change)
                after = table_reads(alias)
            for table, (seq, fetched) in after.items():
                used = (seq - before[table][0], fetched - before[table][1])
                assert used[0] == 0, (client._use_functions, table, used)
                assert used[1] < 10, (client._use_functions, table, used)
            assert wakes == woken, client._use_functions

    plan = matching_plan(alias, store_pk)
    assert "yieldstar_waiterpath_match" in plan, plan
    assert "Seq Scan" not in plan, plan
