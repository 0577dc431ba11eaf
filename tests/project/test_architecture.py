"""The layout rules of ``docs/internals/architecture.md``: the module map matches the tree,
module-level imports form no cycle, and ``core`` imports nothing outside itself."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.paths import ROOT

PACKAGE = ROOT / "yieldstar_django"
PAGE = ROOT / "docs" / "internals" / "architecture.md"


def _modules() -> dict[str, Path]:
    """Every module of the package but the migrations, by dotted name."""
    modules: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" in path.relative_to(PACKAGE).parts:
            continue
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _module_level_imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``name`` imports when it is imported (not under
    ``TYPE_CHECKING``, not inside functions)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If):
                if "TYPE_CHECKING" not in ast.unparse(node.test):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    target = node.module or ""
                for alias in node.names:
                    candidate = f"{target}.{alias.name}"
                    found.add(candidate if candidate in known else target)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)

    visit(ast.parse(path.read_text()).body)
    return {module for module in found if module in known and module != name}


def test_the_module_map_matches_the_tree() -> None:
    listed = set(re.findall(r"^\| `(yieldstar_django/[\w/]+\.py)` \|", PAGE.read_text(), re.M))
    present = {str(path.relative_to(ROOT)) for path in _modules().values()}
    assert sorted(present - listed) == [], "modules missing from architecture.md"
    assert sorted(listed - present) == [], "architecture.md lists modules that do not exist"


def test_module_level_imports_have_no_cycle() -> None:
    modules = _modules()
    graph = {
        name: _module_level_imports(name, path, set(modules)) for name, path in modules.items()
    }
    done: set[str] = set()

    def walk(name: str, trail: list[str]) -> None:
        if name in trail:
            raise AssertionError(
                "import cycle: " + " -> ".join([*trail[trail.index(name) :], name])
            )
        if name in done:
            return
        for target in sorted(graph[name]):
            walk(target, [*trail, name])
        done.add(name)

    for name in sorted(graph):
        walk(name, [])


def test_core_imports_only_core_and_no_django() -> None:
    for name, path in _modules().items():
        if not name.startswith("yieldstar_django.core"):
            continue
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.level:
                assert node.level == 1, f"{name} imports outside core"
                continue
            if isinstance(node, ast.ImportFrom):
                module = node.module or ""
            elif isinstance(node, ast.Import):
                module = node.names[0].name
            else:
                continue
            assert not module.startswith("django"), f"{name} imports {module}"
            assert not module.startswith("yieldstar_django") or module.startswith(
                "yieldstar_django.core"
            ), f"{name} imports {module}"
