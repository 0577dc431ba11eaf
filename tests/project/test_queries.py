"""SQL written once: every statement is a named entry of ``yieldstar_django/sql/queries.sql``
(``sql/queries.py`` loads it), every entry is used, every name the code asks for exists,
tables are named only by the models, and no other module holds an SQL statement."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from django.apps import apps

from tests.paths import ROOT
from yieldstar_django.models.runtime import TERMINAL_STATUSES
from yieldstar_django.sql import queries

PACKAGE = ROOT / "yieldstar_django"
LOADER = PACKAGE / "sql" / "queries.py"

#: A string that starts like an SQL statement.
STATEMENT = re.compile(
    r"\s*(SELECT|INSERT|UPDATE|DELETE|WITH|CREATE|DROP|ALTER|ANALYZE|BEGIN|COMMIT|ROLLBACK|"
    r"SAVEPOINT|RELEASE|SET|SHOW|VACUUM|TRUNCATE|EXPLAIN|PRAGMA|LOCK|GRANT|REINDEX)\s"
)


def _modules() -> list[Path]:
    """The package's modules but the migrations and the loader."""
    return [
        path
        for path in sorted(PACKAGE.rglob("*.py"))
        if "migrations" not in path.relative_to(PACKAGE).parts and path != LOADER
    ]


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of a module, its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _strings(path: Path) -> list[str]:
    """The string literals of a module (an f-string's literal parts, each), docstrings aside."""
    tree = ast.parse(path.read_text())
    skip = _docstrings(tree)
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
    ]


def _is_of(node: ast.AST) -> bool:
    """Whether ``node`` is a call ``queries.of(...)``."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "of"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "queries"
    )


def _asked() -> dict[str, set[str]]:
    """The entry names the package asks for (``queries.of(...).<name>``), by module; a
    module that uses ``queries.of(...)`` otherwise fails the test (its names could not be
    checked)."""
    asked: dict[str, set[str]] = {}
    for path in _modules():
        tree = ast.parse(path.read_text())
        named = {
            id(node.value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and _is_of(node.value)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _is_of(node):
                assert id(node) in named, (
                    f"{path.relative_to(ROOT)}:{node.lineno}: ask for an entry by name, "
                    "queries.of(connection).<name>"
                )
            if isinstance(node, ast.Attribute) and _is_of(node.value):
                asked.setdefault(str(path.relative_to(ROOT)), set()).add(node.attr)
    return asked


def test_every_name_the_code_asks_for_is_an_entry() -> None:
    unknown = {
        module: sorted(names - set(queries.ENTRIES))
        for module, names in _asked().items()
        if names - set(queries.ENTRIES)
    }
    assert not unknown, f"not in queries.sql: {unknown}"


def test_every_entry_is_used() -> None:
    used = set().union(*_asked().values())
    for entry in queries.ENTRIES.values():
        used |= set(re.findall(r"\{([a-z][a-z0-9_]*)\}", entry.text))
    unused = sorted(set(queries.ENTRIES) - used)
    assert not unused, f"entries nothing uses: {unused}"


def test_no_module_but_the_loader_holds_a_statement() -> None:
    found = {}
    for path in _modules():
        module = str(path.relative_to(ROOT))
        statements = {s for s in _strings(path) if STATEMENT.match(s)}
        if statements:
            found[module] = sorted(statements)
    assert not found, f"SQL outside sql/queries.sql: {found}"


def test_tables_are_named_by_the_models_only() -> None:
    """A table's name is written once: by Django's default for the model, or its
    ``db_table``; statements name it ``{<model name>}``."""
    tables = {model._meta.db_table for model in apps.get_app_config("yieldstar").get_models()}
    found = {}
    for path in _modules():
        module = str(path.relative_to(ROOT))
        source = path.read_text()
        named = {t for t in tables if re.search(rf"\b{t}\b", source)}
        named -= set(re.findall(r'db_table = "(\w+)"', source))
        if named:
            found[module] = sorted(named)
    sql = (PACKAGE / "sql" / "queries.sql").read_text()
    assert not {t for t in tables if re.search(rf"\b{t}\b", sql)}, "a table named in queries.sql"
    assert not found, f"tables named outside their model: {found}"


@pytest.mark.parametrize("vendor", ["postgresql", "sqlite"])
def test_every_entry_builds_for_each_vendor(vendor: str) -> None:
    built = queries.of(_connection(vendor))
    for name, entry in queries.ENTRIES.items():
        text = getattr(built, name)
        for point in entry.points:
            text = text.replace("{" + point + "}", "")
        assert "{" not in text and "}" not in text, name
    assert built.delete_store.startswith("DELETE FROM yieldstar_storeinstance WHERE")
    assert built.read_store_row_for_delete.endswith(
        " FOR UPDATE" if vendor == "postgresql" else "store_id = %s"
    )


def test_tables_come_from_the_models() -> None:
    from yieldstar_django.models import WakeIntent

    assert queries.of().count_overdue_intents.startswith(
        f"SELECT COUNT(*) FROM {WakeIntent._meta.db_table} WHERE"
    )


def test_a_name_that_is_not_an_entry_raises() -> None:
    with pytest.raises(AttributeError, match="no SQL entry named 'read_stores'"):
        queries.of().read_stores  # noqa: B018
    with pytest.raises(AttributeError, match="depends on the vendor"):
        queries.of().read_store_row_for_commit  # noqa: B018


def test_one_parameter_per_terminal_status() -> None:
    assert queries.of().terminal_statuses.count("%s") == len(TERMINAL_STATUSES)


@pytest.mark.parametrize(
    ("source", "error"),
    [
        ("-- a --\n-- A.\nSELECT 1\n-- a --\n-- Again.\nSELECT 2\n", "written twice"),
        ("-- a --\nSELECT 1\n", "no one-line comment"),
        ("-- a --\n-- A.\n", "no text"),
        ("-- a(ids) --\n-- A.\nSELECT 1\n", "points it does not use"),
    ],
)
def test_a_malformed_file_fails_to_load(source: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        queries.parse(source)


def test_an_unknown_placeholder_fails_to_build(monkeypatch: pytest.MonkeyPatch) -> None:
    entries = queries.parse("-- a --\n-- A.\nSELECT 1 FROM {wakeintents}\n")
    monkeypatch.setattr(queries, "ENTRIES", entries)
    monkeypatch.setattr(queries, "_built", {})
    with pytest.raises(ValueError, match=r"unknown placeholder \{wakeintents\}"):
        queries.of()


def _connection(vendor: str) -> Any:
    return SimpleNamespace(vendor=vendor)
