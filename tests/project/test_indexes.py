"""The indexes of the API's and the admin's store queries, checked by their plans.

No timings: each test fills the table, runs the query the API or the admin runs (captured,
not rewritten here), and asserts from ``EXPLAIN`` that it is served by its index.
Sequential and bitmap scans are disabled for the ``EXPLAIN`` so that the planner's choice
does not depend on how many rows a test can afford to insert, nor on whether ``VACUUM``
could mark the pages all-visible while other transactions ran (a bitmap scan and a sort
then look cheaper than walking the index in order).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib import admin
from django.db import connections, transaction
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext

from tests.shared.fixtures import db
from yieldstar_django.api.store_lists import store_ids_page
from yieldstar_django.connector import DatabaseStoreClient
from yieldstar_django.core.definition import StoreDefinition
from yieldstar_django.models import AppliedStep, StoreInstance

ROWS = 3000
NAMES = 3


def fill_stores(alias: str) -> None:
    """``ROWS`` stores spread over ``NAMES`` names, ids in no particular order."""
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "INSERT INTO yieldstar_storeinstance "
            "(name, store_id, instance_id, version, state, created_at, updated_at) "
            "SELECT 'n' || (g %% %s), md5(g::text), 'i', 0, '{}', now(), now() "
            "FROM generate_series(1, %s) g",
            [NAMES, ROWS],
        )
        cursor.execute("VACUUM ANALYZE yieldstar_storeinstance")


def plan(alias: str, sql: str, params: Any = ()) -> str:
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute(f"EXPLAIN {sql}", params)
        return "\n".join(row[0] for row in cursor.fetchall())


def captured_plan(alias: str, call: Any) -> str:
    """The plan of the one query ``call()`` runs."""
    with CaptureQueriesContext(connections[alias]) as captured:
        call()
    (query,) = captured.captured_queries
    return plan(alias, query["sql"])


@pytest.mark.parametrize("after", [None, "8"], ids=["first-page", "next-page"])
@pytest.mark.postgres
@db("default")
def test_api_id_page_is_an_index_scan_in_code_point_order(after: str | None) -> None:
    fill_stores("default")
    text = captured_plan("default", lambda: store_ids_page("n1", after, 51))
    assert "yieldstar_store_ids_c" in text, text
    assert "Index Only Scan" in text or "Index Scan" in text, text
    assert "Sort" not in text, text


@pytest.mark.postgres
@db("default")
def test_list_stores_is_an_index_scan_in_code_point_order() -> None:
    fill_stores("default")
    client = DatabaseStoreClient("default")
    definition = StoreDefinition("n2", lambda value: value, lambda id: {})
    text = captured_plan("default", lambda: client.list_stores(definition))
    assert "yieldstar_store_ids_c" in text, text
    assert "Sort" not in text, text


@pytest.mark.postgres
@db("default")
def test_admin_id_prefix_search_uses_the_pattern_index() -> None:
    fill_stores("default")
    model_admin = admin.site._registry[StoreInstance]
    request = RequestFactory().get("/admin/")
    queryset, distinct = model_admin.get_search_results(
        request, StoreInstance.objects.order_by(), "ab"
    )
    assert not distinct
    sql, params = queryset.values_list("pk").query.sql_with_params()
    assert "LIKE" in sql, sql
    text = plan("default", sql, params)
    assert "yieldstar_store_id_prefix" in text, text


def test_admin_ledger_section_walks_the_ledger_index(alias: str) -> None:
    vendor = connections[alias].vendor
    with connections[alias].cursor() as cursor:
        for store in range(20):
            cursor.execute(
                "INSERT INTO yieldstar_appliedstep "
                "(store_name, store_id, execution_id, step_key, result, created_at) "
                "VALUES " + ", ".join(["(%s, %s, %s, %s, %s, CURRENT_TIMESTAMP)"] * 50),
                [v for k in range(50) for v in ("s", f"id{store}", f"e{k}", "k", "{}")],
            )
        cursor.execute("ANALYZE yieldstar_appliedstep")
    # The query of the admin's store page (admin/stores.py, store_page_context).
    queryset = AppliedStep.objects.using(alias).filter(store_name="s", store_id="id3")
    sql, params = queryset.order_by("-created_at", "-pk")[:25].query.sql_with_params()
    if vendor == "postgresql":
        text = plan(alias, sql, params)
        assert "yieldstar_applied_step_recent" in text, text
        assert "Sort" not in text, text
    else:
        with connections[alias].cursor() as cursor:
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
            text = "\n".join(str(row[-1]) for row in cursor.fetchall())
        assert "yieldstar_applied_step_recent" in text, text
        assert "TEMP B-TREE" not in text, text


#: Every index of the app's tables that another index of the same table makes redundant:
#: not unique, no predicate, its columns (with their operator classes and collations) the
#: first columns of the other, which answers every lookup it answers.
REDUNDANT_INDEXES = """
SELECT a.indexrelid::regclass::text, b.indexrelid::regclass::text
  FROM pg_index a
  JOIN pg_index b ON b.indrelid = a.indrelid AND b.indexrelid <> a.indexrelid
 WHERE a.indrelid::regclass::text LIKE 'yieldstar%%'
   AND NOT a.indisunique AND a.indpred IS NULL AND b.indpred IS NULL
   AND a.indexprs IS NULL AND b.indexprs IS NULL
   AND (' ' || b.indkey::text || ' ') LIKE (' ' || a.indkey::text || ' %%')
   AND (' ' || b.indclass::text || ' ') LIKE (' ' || a.indclass::text || ' %%')
   AND (' ' || b.indcollation::text || ' ') LIKE (' ' || a.indcollation::text || ' %%')
 ORDER BY 1, 2
"""


@pytest.mark.postgres
@db("default")
def test_no_index_is_a_prefix_of_another() -> None:
    """Each index costs every insert of its table (a heap row per step, a waiter per
    waiting take) a write: an index whose columns begin another index of the table adds
    that cost and answers nothing the other does not."""
    with connections["default"].cursor() as cursor:
        cursor.execute(REDUNDANT_INDEXES)
        assert cursor.fetchall() == []
