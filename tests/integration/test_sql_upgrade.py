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
from django.db import connection

from yieldstar_django.connector import DatabaseStoreClient

from .test_connector import jobs_store

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
