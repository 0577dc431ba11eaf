"""The plans of the SQL functions (PostgreSQL): the entry points the connector calls run
without sequential scans and plan each statement once per connection
(``plan_cache_mode = force_generic_plan``, set in their files), which the functions they
call inherit."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import DatabaseError, connection

from yieldstar_django.connector import DatabaseStoreClient
from yieldstar_django.core.results import StoreWaiter

from .test_connector import intents, job_awaited, jobs_store, row

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

#: The functions the connector calls.
ENTRY_POINTS = ("yieldstar_commit_mutation_v4", "yieldstar_register_waiter_v3")


def settings_of(name: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(proconfig, '{}') FROM pg_proc WHERE proname = %s", [name])
        return list(cursor.fetchone()[0])


def test_the_entry_points_plan_once_per_connection() -> None:
    """Both entry points carry the settings, and a registration and the commit that wakes
    it work without changing the caller's own setting."""
    if connection.vendor != "postgresql":
        pytest.skip("the SQL functions exist on PostgreSQL only")
    for name in ENTRY_POINTS:
        assert settings_of(name) == ["enable_seqscan=off", "plan_cache_mode=force_generic_plan"]

    d, client = job_awaited("default")
    client.update_store(d, "q", updater=lambda s: s["jobs"].append(1))
    assert row("default", d) == (1, '{"jobs":[1],"other":0}')
    assert intents("default") == [("e", "store", False)]
    with connection.cursor() as cursor:
        cursor.execute("SHOW plan_cache_mode")
        assert cursor.fetchone() == ("auto",)


def test_a_wake_marks_its_waiter_with_a_plan_made_once() -> None:
    """The statement that marks woken waiters takes their ids as an array (``id = ANY``).
    Left to choose, PostgreSQL plans it again on every wake (a custom plan for the array
    at hand, its ids written into the plan); the commit runs it with a generic plan, the
    array a parameter, also after more than five wakes on one connection."""
    if connection.vendor != "postgresql":
        pytest.skip("the SQL functions exist on PostgreSQL only")
    d, client = jobs_store(), DatabaseStoreClient()
    with connection.cursor() as cursor:
        try:
            cursor.execute("LOAD 'auto_explain'")
        except DatabaseError:
            pytest.skip("auto_explain (PostgreSQL's contrib modules) is not installed")
    plans: list[str] = []

    def notice(diagnostic: Any) -> None:
        plans.append(diagnostic.message_primary or "")

    raw = connection.connection
    raw.add_notice_handler(notice)
    try:
        for n in range(8):
            if n == 7:  # the eighth wake: its statements' plans sent back as notices
                with connection.cursor() as cursor:
                    cursor.execute("SET auto_explain.log_min_duration = 0")
                    cursor.execute("SET auto_explain.log_nested_statements = on")
                    cursor.execute("SET auto_explain.log_level = notice")
            snapshot = client.get_store(d, "q")
            waiter = StoreWaiter(
                "wf", "e", "take", d.name, "q", snapshot.instance_id, snapshot.version,
                [("jobs",)],
            )  # fmt: skip
            client.register_waiter(waiter)
            client.update_store(d, "q", updater=lambda s, n=n: s["jobs"].append(n))
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET auto_explain.log_min_duration")
            cursor.execute("RESET auto_explain.log_nested_statements")
            cursor.execute("RESET auto_explain.log_level")
        raw.remove_notice_handler(notice)
    assert intents("default") == [("e", "store", False)] * 8
    marking = [p for p in plans if "UPDATE yieldstar_waiter" in p and "woken_at" in p]
    assert len(marking) == 1, plans
    assert "= ANY ($" in marking[0], marking[0]
