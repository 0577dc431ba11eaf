"""The suite's own hygiene: how a transactional test ends (``tests/shared/reset.py``): no
row of it stays for the next test, a writer still in flight included, and the content
types and permissions are those of the migrated database. And no test names ``auth`` or
``contenttypes`` in ``available_apps``: Django's own flush of such a test (with
``serialized_rollback``) deletes every permission and content type without making them
again, and later tests on the same worker (a user given ``view_execution``, say) would
fail by the order they happen to run in."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.contrib.contenttypes.models import ContentType
from django.db import connections
from django.utils import timezone

from tests.connections import await_lock_wait, second_connection
from tests.paths import ROOT
from tests.polling import join_or_fail
from tests.shared.reset import KEPT, empty_database, is_internal
from yieldstar_django.models import Execution, StoreInstance

#: Both databases, each in a transactional test that names no ``available_apps``.
DATABASES = [
    pytest.param(
        "default",
        id="postgres",
        marks=[pytest.mark.postgres, pytest.mark.django_db(transaction=True)],
    ),
    pytest.param(
        "sqlite", id="sqlite", marks=pytest.mark.django_db(transaction=True, databases=["sqlite"])
    ),
]


def _table_rows(alias: str) -> dict[str, int]:
    """Rows of every table of ``alias`` but the kept ones, the migrations and SQLite's
    statistics."""
    connection = connections[alias]
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        tables = connection.introspection.table_names(cursor, include_views=False)
        counts = {}
        for table in sorted(t for t in tables if not is_internal(t) and t not in KEPT):
            cursor.execute(f"SELECT COUNT(*) FROM {quote(table)}")
            counts[table] = cursor.fetchone()[0]
    return counts


def _permissions(alias: str) -> set[tuple[str, str, str]]:
    return set(
        Permission.objects.using(alias).values_list(
            "content_type__app_label", "content_type__model", "codename"
        )
    )


def _write_everywhere(alias: str) -> None:
    user = User.objects.db_manager(alias).create_user("left-behind")
    group = Group.objects.using(alias).create(name="left-behind")
    group.permissions.add(Permission.objects.using(alias).get(codename="view_execution"))
    user.groups.add(group)
    Execution.objects.using(alias).create(id="left-behind", workflow_id="w", input_json="{}")
    StoreInstance.objects.using(alias).create(
        name="left",
        store_id="behind",
        instance_id="i",
        version=0,
        state="{}",
        created_at=timezone.now(),
        updated_at=timezone.now(),
    )


@pytest.mark.parametrize("database", DATABASES)
def test_the_end_of_a_transactional_test_leaves_no_row(database: str) -> None:
    empty_database(database)
    permissions = _permissions(database)
    _write_everywhere(database)
    assert any(_table_rows(database).values())

    empty_database(database)

    assert {table: n for table, n in _table_rows(database).items() if n} == {}
    assert _permissions(database) == permissions


@pytest.mark.parametrize("database", DATABASES)
def test_changed_permissions_and_content_types_are_made_again(database: str) -> None:
    empty_database(database)
    permissions = _permissions(database)
    Permission.objects.using(database).filter(codename="view_execution").delete()
    stray = ContentType.objects.using(database).create(app_label="stray", model="stray")
    Permission.objects.using(database).create(codename="stray", name="stray", content_type=stray)

    empty_database(database)

    assert _permissions(database) == permissions
    assert not ContentType.objects.using(database).filter(app_label="stray").exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_end_waits_for_a_writer_in_flight_and_deletes_its_rows() -> None:
    """As ``TRUNCATE`` would: the rows of a transaction that commits while the test ends
    are gone too."""
    empty_database("default")
    with second_connection(autocommit=False) as writer:
        writer.execute(
            "INSERT INTO yieldstar_execution (id, workflow_id, status, input_json, "
            "result_json, error_json, waiting_on, lease_owner, wake_pending, runs, "
            "created_at, updated_at) VALUES ('in-flight', 'w', 'pending', '{}', '', '', "
            "'', '', false, 0, now(), now())"
        )
        pid: list[int] = []
        errors: list[BaseException] = []

        def end() -> None:
            try:
                with connections["default"].cursor() as cursor:
                    cursor.execute("SELECT pg_backend_pid()")
                    pid.append(cursor.fetchone()[0])
                empty_database("default")
            except BaseException as error:
                errors.append(error)
            finally:
                connections["default"].close()

        ender = threading.Thread(target=end)
        ender.start()
        try:
            await_lock_wait(pid, "the end of the test")
        finally:
            writer.commit()
            join_or_fail(ender, what="the end of the test")
    assert errors == []
    assert not Execution.objects.filter(id="in-flight").exists()


FLUSH_SENSITIVE = {"django.contrib.auth", "django.contrib.contenttypes"}


def _constants(node: ast.AST) -> set[object]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant)}


def flushed_sensitive_apps(path: Path) -> list[int]:
    """Lines of ``available_apps=`` arguments in ``path`` that name auth or contenttypes,
    given as a literal or as a module-level name."""
    tree = ast.parse(path.read_text(), str(path))
    assigned = {
        target.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "available_apps":
            value = node.value
            if isinstance(value, ast.Name) and value.id in assigned:
                value = assigned[value.id]
            if _constants(value) & FLUSH_SENSITIVE:
                lines.append(node.value.lineno)
    return lines


def test_no_transactional_test_flushes_auth_or_contenttypes_without_post_migrate() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for line in flushed_sensitive_apps(path)
    ]
    assert found == [], f"available_apps naming auth or contenttypes: {found}"


def test_the_check_finds_a_named_list(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        'APPS = ["yieldstar_django", "django.contrib.auth"]\n'
        "mark = django_db(transaction=True, available_apps=APPS)\n"
        'ok = django_db(transaction=True, available_apps=["yieldstar_django"])\n'
    )
    assert flushed_sensitive_apps(sample) == [2]
