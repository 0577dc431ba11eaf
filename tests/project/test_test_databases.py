"""The suite's own hygiene: a transactional test that names ``available_apps`` is flushed
without ``post_migrate``, so if those apps include ``auth`` or ``contenttypes`` the flush
deletes every permission and content type, and later tests on the same worker (a user
given ``view_execution``, say) fail by the order they happen to run in."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.paths import ROOT

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
