"""The admin on big rows and big tables: a page's cost does not grow with what it does not
show (a state, an execution's input, a claimed value) nor with a table it reads a page of
(a store's waiters, an execution's heap)."""

from __future__ import annotations

import time
import tracemalloc
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from yieldstar_django.core.definition import StoreDefinition
from yieldstar_django.core.results import StoreStepId
from yieldstar_django.core.store import StoreClient
from yieldstar_django.models import ClaimLeaseRecord, Execution, StoreInstance

from .test_runtime import EXECUTIONS, make_execution
from .test_store_pages import LIST

pytestmark = pytest.mark.django_db

#: A column of about 300 KB: what no list page should fetch, row after row.
BIG = "x" * 300_000


def fetched(client: Client, url: str, data: dict[str, Any] | None = None) -> list[str]:
    """The SQL of the queries ``url`` ran (a GET, or a POST of ``data``), which must answer
    200."""
    with CaptureQueriesContext(connection) as queries:
        response = client.post(url, data) if data is not None else client.get(url)
    assert response.status_code == 200
    return [q["sql"] for q in queries.captured_queries]


def selecting(queries: list[str], table: str, column: str) -> list[str]:
    """The queries that fetch ``table.column`` whole (in a ``SELECT`` list, not inside a
    function such as ``SUBSTR``)."""
    name = f'"{table}"."{column}"'
    found = []
    for sql in queries:
        head = sql.split(" FROM ", 1)[0]
        if head.upper().startswith("SELECT") and any(
            part.strip().startswith(name) for part in head[len("SELECT") :].split(",")
        ):
            found.append(sql)
    return found


def test_the_store_list_fetches_no_state(
    admin_client: Client, counters: StoreDefinition, store_client: StoreClient
) -> None:
    """The list shows no state: a page of stores of 300 KB each fetches none of them."""
    for n in range(3):
        store_client.get_store(counters, f"big-{n}")
    StoreInstance.objects.filter(name=counters.name).update(
        state='{"count":0,"tags":["' + BIG + '"]}'
    )
    queries = fetched(admin_client, LIST)
    assert selecting(queries, "yieldstar_storeinstance", "store_id")  # the list's query
    assert selecting(queries, "yieldstar_storeinstance", "state") == []
    queries = fetched(admin_client, f"{LIST}?name={counters.name}&q=big-")
    assert selecting(queries, "yieldstar_storeinstance", "state") == []


def test_the_execution_list_fetches_no_input_result_or_error(admin_client: Client) -> None:
    """The list shows id, workflow, status, runs and times: executions with inputs,
    results and errors of 300 KB fetch none of them."""
    for n in range(3):
        make_execution(f"big-{n}")
    Execution.objects.update(
        input_json='{"args":["' + BIG + '"],"kwargs":{}}',
        result_json=f'"{BIG}"',
        error_json='{"message":"' + BIG + '"}',
    )
    for url in (EXECUTIONS, f"{EXECUTIONS}?finished=no&q=big-"):
        queries = fetched(admin_client, url)
        assert selecting(queries, "yieldstar_execution", "workflow_id")  # the list's query
        for column in ("input_json", "result_json", "error_json"):
            assert selecting(queries, "yieldstar_execution", column) == [], column


def test_the_release_confirmation_fetches_no_whole_value(
    admin_client: Client, counters: StoreDefinition
) -> None:
    """The confirmation page of *Release now* shows the first 120 characters of each
    value: it does not fetch values of 300 KB whole."""
    for n in range(3):
        make_execution(f"holder-{n}")
        ClaimLeaseRecord.objects.create(
            id=f"holder-{n}/0",
            execution_id=f"holder-{n}",
            step_key="0",
            store_name=counters.name,
            store_id="q",
            value_json=f'"{BIG}"',
            expires_at=timezone.now() + timedelta(minutes=5),
        )
    url = reverse("admin:yieldstar_claimleaserecord_changelist")
    data = {"action": "release_now", "_selected_action": ["holder-0/0", "holder-2/0"]}
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.post(url, data)
    assert response.status_code == 200
    body = response.content.decode()
    assert "Yes, release them" in body
    assert f'"{BIG[:118]}…' in body.replace("&quot;", '"')  # as truncatechars:120 cuts it
    sql = [q["sql"] for q in queries.captured_queries]
    assert selecting(sql, "yieldstar_claim_lease", "value_json") == []


def plan_of(queries: list[str], table: str) -> str:
    """PostgreSQL's plan of the one query of ``queries`` that reads a page of ``table``
    (``ORDER BY`` ... ``LIMIT``)."""
    (sql,) = [q for q in queries if f'FROM "{table}"' in q and "ORDER BY" in q and "LIMIT" in q]
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}")
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.postgres
def test_the_waiters_of_a_store_are_read_a_page_at_a_time(
    admin_client: Client, counters: StoreDefinition, store_client: StoreClient
) -> None:
    """The store page lists a store's first waiters in the order they registered, through
    an index: it does not sort every waiter of a store thousands wait on."""
    store_client.get_store(counters, "hot")
    store = StoreInstance.objects.get(name=counters.name, store_id="hot")
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO yieldstar_waiter (workflow_id, execution_id, step_key, store_pk, "
            "instance_id, since_version, read_paths, created_at) "
            "SELECT 'wf', 'waiting-' || n, '0', %s, %s, 0, '[[\"count\"]]', "
            "now() - make_interval(secs => (n * 7919) %% 5000) "
            "FROM generate_series(1, 5000) AS n",
            [store.pk, store.instance_id],
        )
        cursor.execute("ANALYZE yieldstar_waiter")
    url = reverse("admin:yieldstar_storeinstance_change", args=[quote(store.pk)])
    queries = fetched(admin_client, url)
    plan = plan_of(queries, "yieldstar_waiter")
    assert "Sort" not in plan and "Seq Scan" not in plan, plan


@pytest.mark.postgres
def test_a_page_of_a_long_heap_is_read_through_an_index(admin_client: Client) -> None:
    """An execution's page reads one page of its heap, in replay order, through an index:
    it does not sort the whole heap of an execution that recorded thousands of steps."""
    make_execution("long", steps=5000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE yieldstar_execution_step")
    url = reverse("admin:yieldstar_execution_change", args=[quote("long")])
    queries = fetched(admin_client, f"{url}?steps=40")
    plan = plan_of(queries, "yieldstar_execution_step")
    assert "Sort" not in plan and "Seq Scan" not in plan, plan


def test_a_diff_of_long_lines_is_capped_in_characters(
    admin_client: Client, counters: StoreDefinition, store_client: StoreClient
) -> None:
    """Diffs are capped in lines and each line in characters: the history of a store whose
    every version rewrites a string of 100 KB does not render megabytes."""
    for n in range(4):
        store_client.update_store(
            counters,
            "long-lines",
            updater=lambda draft, n=n: draft.update(tags=[str(n) * 100_000]),
            step_id=StoreStepId("e", f"s{n}"),
        )
    store = StoreInstance.objects.get(name=counters.name, store_id="long-lines")
    url = reverse("admin:yieldstar_storeinstance_change", args=[quote(store.pk)])
    response = admin_client.get(url)
    assert response.status_code == 200
    html = response.content.decode()
    assert '<span class="yieldstar-add">+    &quot;3333' in html  # the diffs are shown
    # The state itself is shown (100 KB, under the pretty-print cap), and each of the 4
    # diffs (3 against a kept previous state, and the creation) holds at most a few short
    # lines: far from the 3 x 200 KB of whole lines.
    assert len(html) < 160_000, len(html)


def test_the_page_of_a_state_of_millions_of_elements_formats_only_what_it_shows(
    admin_client: Client, counters: StoreDefinition, store_client: StoreClient
) -> None:
    """A state of 2,000,000 strings (8 MB of JSON) is shown cut at the display cap, and the
    page formats no more than it shows: its memory stays within a small multiple of the
    state's text (formatting it whole took gigabytes and a quarter of a minute)."""
    store_client.get_store(counters, "huge")
    text = "[" + ",".join(['"a"'] * 2_000_000) + "]"
    StoreInstance.objects.filter(name=counters.name, store_id="huge").update(state=text)
    store = StoreInstance.objects.get(name=counters.name, store_id="huge")
    url = reverse("admin:yieldstar_storeinstance_change", args=[quote(store.pk)])
    tracemalloc.start()
    started = time.monotonic()
    try:
        response = admin_client.get(url)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.monotonic() - started < 60  # a hang guard only
    assert response.status_code == 200
    html = response.content.decode()
    assert "more characters not shown" in html or "not shown" in html
    assert len(html) < 1_000_000, len(html)  # 200,000 characters, escaped
    assert peak < 8 * len(text), (peak, len(text))
