"""How a transactional test ends: every table emptied with ``DELETE``, in one round trip
(a plugin of ``tests/conftest.py``).

Django's ``TransactionTestCase`` (``django_db(transaction=True)``, ``transactional_db``)
ends each test with ``flush``: a ``TRUNCATE`` of the tables, which on PostgreSQL gives
every table and index new files, and, for a test without ``available_apps``, the deletion
of every content type and permission and their re-creation by ``post_migrate``. That
costs 0.1 to 0.3 s a test, most of the time of the suites on the real databases. Here
instead, on each database the test used:

- every table but ``django_migrations`` (and SQLite's own), the content types and the
  permissions is emptied by ``DELETE``, in one transaction, after an ``EXCLUSIVE`` lock
  on those tables that waits, as ``TRUNCATE`` does, for a writer still in flight (its
  rows are deleted too);
- the content types and permissions, the rows ``post_migrate`` makes, are compared with
  what they were after the first flush of that database: if a test changed them they are
  flushed and made again as Django does, otherwise they stay.

So a test sees no row of an earlier test, whatever ``available_apps`` it names, and the
permissions and content types are those of the migrated database. A test with
``serialized_rollback`` ends as Django ends it. Sequences are not reset (nor are they by
Django's flush). A table keeps the pages of the rows deleted until it is vacuumed: a test
of query plans that needs a table small on disk truncates it first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import DatabaseError, connections, transaction
from django.test import TransactionTestCase

#: Tables that ``post_migrate`` fills: kept while no test changes them.
KEPT = ("django_content_type", "auth_permission")

#: Never emptied (Django's flush leaves it too).
MIGRATIONS = "django_migrations"


def is_internal(table: str) -> bool:
    """The migrations table, or one of SQLite's own (``sqlite_stat1``, the statistics of
    ``ANALYZE``): never emptied, as Django's flush never empties them."""
    return table == MIGRATIONS or table.startswith("sqlite_")


#: (alias, database name) -> the rows of the ``KEPT`` tables after the last full flush.
_reference: dict[tuple[str, str], list[list[tuple[Any, ...]]]] = {}

#: (alias, database name) -> the tables to empty.
_tables: dict[tuple[str, str], list[str]] = {}


def _key(alias: str) -> tuple[str, str]:
    return alias, str(connections[alias].settings_dict["NAME"])


def _existing_tables(alias: str) -> list[str]:
    connection = connections[alias]
    with connection.cursor() as cursor:
        names = connection.introspection.table_names(cursor, include_views=False)
    return sorted(name for name in names if not is_internal(name))


def _kept_rows(alias: str) -> list[list[tuple[Any, ...]]]:
    connection = connections[alias]
    quote = connection.ops.quote_name
    rows = []
    with connection.cursor() as cursor:
        for table in KEPT:
            if table in _tables[_key(alias)]:
                cursor.execute(f"SELECT * FROM {quote(table)} ORDER BY 1")
                rows.append([tuple(row) for row in cursor.fetchall()])
    return rows


@contextmanager
def _every_app(available_apps: list[str] | None) -> Iterator[None]:
    """The whole app registry, even inside a test that names ``available_apps``."""
    if available_apps is None:
        yield
        return
    apps.unset_available_apps()
    try:
        yield
    finally:
        apps.set_available_apps(available_apps)


def _flush(alias: str, available_apps: list[str] | None) -> None:
    """Django's flush of the whole database, with ``post_migrate``."""
    with _every_app(available_apps):
        call_command(
            "flush",
            verbosity=0,
            interactive=False,
            database=alias,
            reset_sequences=False,
            allow_cascade=False,
            inhibit_post_migrate=False,
        )


def _delete(alias: str, tables: list[str]) -> None:
    connection = connections[alias]
    quote = connection.ops.quote_name
    names = [quote(table) for table in tables]
    with transaction.atomic(using=alias), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # One round trip. Django's foreign keys are deferred: any order holds.
            cursor.execute(
                f"LOCK TABLE {', '.join(names)} IN EXCLUSIVE MODE; "
                + " ".join(f"DELETE FROM {name};" for name in names)
            )
        else:  # SQLite: the transaction already holds the only write lock
            for name in names:
                cursor.execute(f"DELETE FROM {name}")


def empty_database(alias: str, available_apps: list[str] | None = None) -> None:
    """Empty the database ``alias`` as the end of a transactional test does (see above).
    ``available_apps``: those of the test running, if it names some."""
    key = _key(alias)
    if key not in _tables:
        _tables[key] = _existing_tables(alias)
    if key not in _reference or _kept_rows(alias) != _reference[key]:
        _flush(alias, available_apps)
        _tables[key] = _existing_tables(alias)
        _reference[key] = _kept_rows(alias)
        return
    try:
        _delete(alias, [table for table in _tables[key] if table not in KEPT])
    except DatabaseError:  # a table created or dropped since: look again, once
        _tables[key] = _existing_tables(alias)
        _delete(alias, [table for table in _tables[key] if table not in KEPT])


def _fixture_teardown(
    original: Callable[[TransactionTestCase], None],
) -> Callable[[TransactionTestCase], None]:
    def teardown(self: TransactionTestCase) -> None:
        if self.serialized_rollback:
            original(self)
            return
        for alias in self._databases_names(include_mirrors=False):  # type: ignore[attr-defined]
            empty_database(alias, self.available_apps)

    teardown.__doc__ = __doc__
    return teardown


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    original = TransactionTestCase._fixture_teardown  # type: ignore[attr-defined]
    TransactionTestCase._fixture_teardown = _fixture_teardown(original)  # type: ignore[attr-defined]
