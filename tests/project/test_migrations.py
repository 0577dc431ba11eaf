"""Every model change of the yieldstar app has its migration; ``sqlmigrate`` shows what
each migration runs on the database it is asked about."""

from __future__ import annotations

import importlib
import io

import pytest
from django.core.management import call_command
from django.db import connections

from tests.paths import ROOT

MIGRATIONS = sorted(path.stem for path in (ROOT / "yieldstar_django" / "migrations").glob("0*.py"))
#: The migrations whose only SQL is PostgreSQL's functions, indexes and table settings.
POSTGRES_ONLY = {
    "0002_postgres": (
        "CREATE OR REPLACE FUNCTION yieldstar_commit_mutation_v3",
        "DROP FUNCTION IF EXISTS yieldstar_register_waiter_v2",
    ),
}


@pytest.mark.django_db
def test_no_missing_migrations() -> None:
    out = io.StringIO()
    try:
        call_command("makemigrations", "yieldstar", check=True, dry_run=True, stdout=out)
    except SystemExit:  # pragma: no cover - only on failure
        pytest.fail(f"yieldstar has model changes without a migration:\n{out.getvalue()}")


def sqlmigrate(alias: str, name: str, backwards: bool) -> str:
    out = io.StringIO()
    call_command("sqlmigrate", "yieldstar", name, database=alias, backwards=backwards, stdout=out)
    return out.getvalue()


@pytest.mark.django_db(databases=["default", "sqlite"], transaction=True)
@pytest.mark.parametrize("name", MIGRATIONS)
def test_sqlmigrate_writes_every_migration_as_sql(name: str) -> None:
    """On PostgreSQL the functions' DDL is printed (a DBA can review or apply it); on
    SQLite the PostgreSQL-only operations say they do nothing there. (Transactional: SQLite's
    schema editor refuses to open inside the test's transaction.)"""
    for alias in dict.fromkeys(["default", "sqlite"]):
        postgres = connections[alias].vendor == "postgresql"
        for backwards in (False, True):
            text = sqlmigrate(alias, name, backwards)
            assert "CANNOT BE WRITTEN AS SQL" not in text, (alias, backwards, text)
            if name not in POSTGRES_ONLY:
                continue
            assert "PostgreSQL only" in text, text
            expected = POSTGRES_ONLY[name][backwards]
            if postgres and expected is not None:
                assert expected in text, (backwards, text)
            if not postgres:
                assert "FUNCTION" not in text and "INDEX" not in text, text


#: The migrations of the first release; every later one must keep its rolling-deploy rule.
FIRST_RELEASE = {"0001_initial", "0002_postgres"}


@pytest.mark.parametrize("name", [name for name in MIGRATIONS if name not in FIRST_RELEASE])
def test_a_new_not_null_column_has_a_database_default(name: str) -> None:
    """``docs/internals/versioning.md``: during a rolling deploy the previous release
    inserts rows without naming a column it does not know, so a column added after the
    first release is nullable or has a ``db_default``."""
    from django.db.migrations import AddField
    from django.db.models import NOT_PROVIDED

    module = importlib.import_module(f"yieldstar_django.migrations.{name}")
    for operation in module.Migration.operations:
        if not isinstance(operation, AddField):
            continue
        field = operation.field
        assert field.null or field.db_default is not NOT_PROVIDED, (
            f"{name}: {operation.model_name}.{operation.name} is NOT NULL without a db_default"
        )
