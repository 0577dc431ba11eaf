"""Upgrading the SQL functions of a database migrated by an earlier release (PostgreSQL).

An earlier release's ``yieldstar_commit_deletion_v2`` and ``yieldstar_commit_mutation_v2``
returned their columns as OUT parameters; ``0006_commit_deletes`` makes them wrappers of
``yieldstar_commit_mutation_v3`` returning a ``yieldstar_commit_outcome_v1``, which
``CREATE OR REPLACE`` alone cannot do. The test puts functions of the old shape in place
(in its own transaction, rolled back at its end) and runs the migration's operation.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from django.apps import apps
from django.db import DatabaseError, connection

from yieldstar_django.connector import DatabaseStoreClient
from yieldstar_django.core.results import StoreWaiter

from .test_connector import intents, job_awaited, jobs_store, row

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

OLD_SHAPE = {
    "yieldstar_commit_deletion_v2": "text, text, text, bigint, text, text, text, text, "
    "double precision",
    "yieldstar_commit_mutation_v2": "text, text, text, bigint, boolean, text, text, text, "
    "boolean, text[], text[], text, text, text, text, boolean, bigint, double precision",
}
OUT_PARAMETERS = (
    "OUT status text, OUT recorded text, OUT current_instance_id text, OUT current_version "
    "bigint, OUT current_state text, OUT intent_ids bigint[], OUT wake_execution_ids text[], "
    "OUT wake_workflow_ids text[]"
)


def result_type(name: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_function_result(oid) FROM pg_proc WHERE proname = %s", [name])
        return str(cursor.fetchone()[0])


def test_migration_0006_upgrades_the_functions_of_an_earlier_release() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the SQL functions exist on PostgreSQL only")
    with connection.cursor() as cursor:
        for name, arguments in OLD_SHAPE.items():
            cursor.execute(f"DROP FUNCTION {name}({arguments})")
            cursor.execute(
                f"CREATE FUNCTION {name}({arguments}, {OUT_PARAMETERS}) LANGUAGE sql AS "
                "$$ SELECT 'old'::text, NULL::text, NULL::text, NULL::bigint, NULL::text, "
                "NULL::bigint[], NULL::text[], NULL::text[] $$"
            )
        cursor.execute("DROP TYPE yieldstar_commit_outcome_v1")
    assert result_type("yieldstar_commit_deletion_v2") == "record"

    migration: Any = importlib.import_module("yieldstar_django.migrations.0006_commit_deletes")
    with connection.schema_editor(atomic=False) as editor:
        migration.Migration.operations[0].code(apps, editor)

    for name in OLD_SHAPE:
        assert result_type(name) == "yieldstar_commit_outcome_v1"
    d = jobs_store()
    client = DatabaseStoreClient("default")
    snap = client.get_store(d, "q")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT status FROM yieldstar_commit_deletion_v2(%s, %s, %s, %s, NULL, NULL, NULL, "
            "'delete', 0)",
            [d.name, "q", snap.instance_id, snap.version],
        )
        assert cursor.fetchone() == ("committed",)
    assert client.read_store(d, "q") is None


def settings_of(name: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(proconfig, '{}') FROM pg_proc WHERE proname = %s", [name])
        return list(cursor.fetchone()[0])


def test_migration_0008_plans_the_entry_points_once_per_connection() -> None:
    """Both entry points run without sequential scans and with generic plans; backward,
    only the plan setting goes; forward again, it is back, and a registration and the
    commit that wakes it still work, without changing the caller's own setting."""
    if connection.vendor != "postgresql":
        pytest.skip("the SQL functions exist on PostgreSQL only")
    names = ("yieldstar_commit_mutation_v3", "yieldstar_register_waiter_v1")
    for name in names:
        assert settings_of(name) == ["enable_seqscan=off", "plan_cache_mode=force_generic_plan"]

    migration: Any = importlib.import_module("yieldstar_django.migrations.0008_generic_plans")
    operation = migration.Migration.operations[0]
    with connection.schema_editor(atomic=False) as editor:
        operation.reverse_code(apps, editor)
    for name in names:
        assert settings_of(name) == ["enable_seqscan=off"]
    with connection.schema_editor(atomic=False) as editor:
        operation.code(apps, editor)
    for name in names:
        assert settings_of(name) == ["enable_seqscan=off", "plan_cache_mode=force_generic_plan"]

    d, client = job_awaited("default")
    client.update_store(d, "q", updater=lambda s: s["jobs"].append(1))
    assert row("default", d) == (1, '{"jobs":[1],"other":0}')
    assert intents("default") == [("e", "store", False)]
    with connection.cursor() as cursor:
        cursor.execute("SHOW plan_cache_mode")
        assert cursor.fetchone() == ("auto",)


def test_migration_0011_adds_the_fenced_registration_beside_the_previous_one() -> None:
    """``yieldstar_register_waiter_v2`` runs with the settings of the other entry points;
    backward it goes and ``_v1`` stays (the previous release registers with it); forward
    again, it is back and registers."""
    if connection.vendor != "postgresql":
        pytest.skip("the SQL functions exist on PostgreSQL only")
    v1, v2 = "yieldstar_register_waiter_v1", "yieldstar_register_waiter_v2"
    assert settings_of(v2) == ["enable_seqscan=off", "plan_cache_mode=force_generic_plan"]

    migration: Any = importlib.import_module(
        "yieldstar_django.migrations.0011_register_waiter_fenced"
    )
    operation = migration.Migration.operations[0]
    with connection.schema_editor(atomic=False) as editor:
        operation.reverse_code(apps, editor)
    with connection.cursor() as cursor:
        cursor.execute("SELECT proname FROM pg_proc WHERE proname IN (%s, %s)", [v1, v2])
        assert cursor.fetchall() == [(v1,)]
    with connection.schema_editor(atomic=False) as editor:
        operation.code(apps, editor)
    assert settings_of(v2) == ["enable_seqscan=off", "plan_cache_mode=force_generic_plan"]

    d, client = job_awaited("default")
    assert [w.execution_id for w in client.waiters(d, "q")] == ["e"]


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
