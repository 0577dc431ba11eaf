"""The layout rules of ``docs/internals/architecture.md``, read from the page itself: the
module map matches the tree; the layer drawing places every module of the package in one
layer; every import (module-level, function-level, a lazy export; not one under
``if TYPE_CHECKING:``) points to its own layer or one below; the imports form no cycle; no
module uses another's private names; ``core`` imports nothing outside itself, nor Django
or DRF."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.util import resolve_name
from itertools import pairwise
from pathlib import Path

from tests.paths import ROOT

PACKAGE = ROOT / "yieldstar_django"
PAGE = ROOT / "docs" / "internals" / "architecture.md"
CORE = "yieldstar_django.core"


@dataclass(frozen=True)
class Import:
    """One import of a module: where it is, what it names, and how it runs."""

    module: str
    path: str  # relative to the repository
    line: int
    target: str  # a module of the package when it names one, else the module as written
    statement: str
    kind: str  # "module-level", "function-level", "lazy export"

    def __str__(self) -> str:
        return f"{self.path}:{self.line} ({self.kind}) {self.statement}"


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


def _type_checking(test: ast.expr) -> bool | None:
    """``True`` for ``TYPE_CHECKING``, ``False`` for ``not TYPE_CHECKING``, else ``None``."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _type_checking(test.operand)
        return None if inner is None else not inner
    if ast.unparse(test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
        return True
    return None


def _nodes(tree: ast.Module, type_checking: bool) -> Iterator[tuple[ast.AST, bool]]:
    """Every node (that runs, unless ``type_checking``: then those under ``if
    TYPE_CHECKING:`` too), with whether it is inside a function."""

    def walk(node: ast.AST, in_function: bool) -> Iterator[tuple[ast.AST, bool]]:
        yield node, in_function
        inside = in_function or isinstance(
            node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
        )
        checking = _type_checking(node.test) if isinstance(node, ast.If) else None
        if isinstance(node, ast.If) and checking is not None and not type_checking:
            kept = node.orelse if checking else node.body
            children: list[ast.AST] = [node.test, *kept]
        else:
            children = list(ast.iter_child_nodes(node))
        for child in children:
            yield from walk(child, inside)

    yield from walk(tree, False)


def imports_of(
    name: str, path: str, source: str, known: set[str], *, type_checking: bool = False
) -> list[Import]:
    """Every import ``source`` (module ``name``, at ``path``) makes when it runs (and those
    under ``if TYPE_CHECKING:`` too when ``type_checking``)."""
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    tree = ast.parse(source)
    found: list[Import] = []
    lazy_tables: set[str] = set()
    for node, in_function in _nodes(tree, type_checking):
        kind = "function-level" if in_function else "module-level"
        if isinstance(node, ast.ImportFrom):
            written = "." * node.level + (node.module or "")
            base = resolve_name(written, package) if node.level else written
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                target = candidate if candidate in known else base
                statement = f"from {written} import {alias.name}"
                found.append(Import(name, path, node.lineno, target, statement, kind))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                statement = f"import {alias.name}"
                found.append(Import(name, path, node.lineno, alias.name, statement, kind))
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func).endswith("lazy_exports")
            and len(node.args) == 3
            and isinstance(node.args[2], ast.Name)
        ):
            lazy_tables.add(node.args[2].id)
    for node in tree.body:  # the tables handed to ``lazy_exports``: imports on first access
        target_names = (
            [t.id for t in node.targets if isinstance(t, ast.Name)]
            if isinstance(node, ast.Assign)
            else [node.target.id]
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
            else []
        )
        value = getattr(node, "value", None)
        if not set(target_names) & lazy_tables or not isinstance(value, ast.Dict):
            continue
        for key, module in zip(value.keys, value.values, strict=True):
            assert isinstance(key, ast.Constant) and isinstance(module, ast.Constant)
            assert isinstance(module.value, str), f"{path}:{module.lineno} is not a module name"
            target = resolve_name(module.value, package)
            statement = f"{key.value!s} from {module.value}"
            found.append(Import(name, path, module.lineno, target, statement, "lazy export"))
    return found


def _all_imports(*, type_checking: bool = False) -> list[Import]:
    modules = _modules()
    return [
        found
        for name, path in modules.items()
        for found in imports_of(
            name,
            str(path.relative_to(ROOT)),
            path.read_text(),
            set(modules),
            type_checking=type_checking,
        )
    ]


def _layer_drawing() -> list[tuple[str, list[str]]]:
    """The layers of the page's drawing, top first, each with the files and packages
    (relative to ``yieldstar_django/``) its lines name."""
    section = PAGE.read_text().split("\n## Layers\n", 1)[1]
    drawing = section.split("```", 2)[1]
    layers: list[tuple[str, list[str]]] = []
    for line in drawing.splitlines()[1:]:
        named = re.match(r"^ ([a-z]+(?: [a-z]+)?)  +(.*)$", line)
        if named:
            layers.append((named[1], []))
        entries = re.findall(r"(?<![\w/.])((?:\w+/)+|(?:\w+/)*\w+\.py)(?![\w/])", line)
        if entries:
            assert layers, f"the drawing names {entries} above its first layer"
            layers[-1][1].extend(entries)
    return layers


def _layer_of() -> dict[str, tuple[int, str]]:
    """Each module's layer: (its depth from the top, its name)."""
    modules = _modules()
    placed: dict[str, list[tuple[int, str, str]]] = {name: [] for name in modules}
    for depth, (layer, entries) in enumerate(_layer_drawing()):
        for entry in entries:
            covered = [
                name
                for name, path in modules.items()
                if (
                    path.relative_to(PACKAGE).as_posix().startswith(entry)
                    if entry.endswith("/")
                    else path.relative_to(PACKAGE).as_posix() == entry
                )
            ]
            assert covered, f"the layer drawing names {entry!r}, which is not in the package"
            for name in covered:
                placed[name].append((depth, layer, entry))
    unplaced = sorted(name for name, places in placed.items() if not places)
    assert unplaced == [], f"modules in no layer of the drawing: {unplaced}"
    twice = {name: [e for *_, e in places] for name, places in placed.items() if len(places) > 1}
    assert twice == {}, f"modules the drawing names more than once: {twice}"
    return {name: places[0][:2] for name, places in placed.items()}


def layer_violations(imports: list[Import], layer_of: dict[str, tuple[int, str]]) -> list[str]:
    """The imports of a module of a layer above."""
    return [
        f"{found} imports {found.target} of the layer '{layer_of[found.target][1]}' above "
        f"'{layer_of[found.module][1]}'"
        for found in imports
        if found.target in layer_of and layer_of[found.target][0] < layer_of[found.module][0]
    ]


def cycles(imports: list[Import]) -> list[str]:
    """The cycles a depth-first walk of the import graph closes (at least one through every
    cyclic part), each step with the import that makes it."""
    graph: dict[str, dict[str, Import]] = {}
    for found in imports:
        inside = found.target.startswith("yieldstar_django") and found.target != found.module
        if inside:
            graph.setdefault(found.module, {}).setdefault(found.target, found)
    reported: list[str] = []
    done: set[str] = set()

    def walk(name: str, trail: list[str]) -> None:
        if name in trail:
            loop = [*trail[trail.index(name) :], name]
            steps = [str(graph[a][b]) for a, b in pairwise(loop)]
            reported.append(" -> ".join(loop) + "\n    " + "\n    ".join(steps))
            return
        if name in done:
            return
        for target in sorted(graph.get(name, {})):
            walk(target, [*trail, name])
        done.add(name)

    for name in sorted(graph):
        walk(name, [])
    return reported


def _private(name: str) -> bool:
    return name.startswith("_") and not name.endswith("__") and name != "_meta"


def private_uses(name: str, path: str, source: str, known: set[str]) -> list[str]:
    """Where ``source`` imports another module's private name, or reads one off a module of
    the package it imported (``module._name``; a dunder name and ``_meta`` are public)."""
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    tree = ast.parse(source)
    uses: list[str] = []
    modules: dict[str, str] = {}  # a local name -> the module of the package it is
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            written = "." * node.level + (node.module or "")
            base = resolve_name(written, package) if node.level else written
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    modules[alias.asname or alias.name] = f"{base}.{alias.name}"
                elif _private(alias.name) and base in known and base != name:
                    uses.append(
                        f"{path}:{node.lineno} from {written} import {alias.name} uses a "
                        f"private name of {base}"
                    )
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in known:
                    modules[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and modules.get(node.value.id, name) != name
            and _private(node.attr)
        ):
            uses.append(
                f"{path}:{node.lineno} {ast.unparse(node)} uses a private name of "
                f"{modules[node.value.id]}"
            )
    return sorted(uses, key=lambda use: int(use.split(":")[1].split(" ")[0]))


def core_violations(imports: list[Import]) -> list[str]:
    """The imports of a ``core`` module of anything of the package outside ``core``, or of
    Django or DRF."""
    return [
        f"{found} imports {found.target}"
        for found in imports
        if (found.module == CORE or found.module.startswith(f"{CORE}."))
        and re.match(r"(django|rest_framework|yieldstar_django)(\.|$)", found.target)
        and not re.match(rf"{re.escape(CORE)}(\.|$)", found.target)
    ]


# -- the package ----------------------------------------------------------------------


def test_the_module_map_matches_the_tree() -> None:
    listed = set(re.findall(r"^\| `(yieldstar_django/[\w/]+\.py)` \|", PAGE.read_text(), re.M))
    present = {str(path.relative_to(ROOT)) for path in _modules().values()}
    assert sorted(present - listed) == [], "modules missing from architecture.md"
    assert sorted(listed - present) == [], "architecture.md lists modules that do not exist"


def test_the_layer_drawing_places_every_module_once() -> None:
    names = [layer for layer, _ in _layer_drawing()]
    assert len(names) == len(set(names)) >= 2, names
    assert set(_layer_of()) == set(_modules())


def test_every_import_points_to_its_layer_or_one_below() -> None:
    assert layer_violations(_all_imports(), _layer_of()) == []


def test_the_imports_form_no_cycle() -> None:
    assert cycles(_all_imports()) == []


def test_no_module_uses_another_modules_private_names() -> None:
    modules = _modules()
    known = set(modules)
    uses = [
        use
        for name, path in modules.items()
        for use in private_uses(name, str(path.relative_to(ROOT)), path.read_text(), known)
    ]
    assert uses == []


def test_core_imports_only_core_and_neither_django_nor_drf() -> None:
    """Nor under ``if TYPE_CHECKING:``, nor by a module's name (``"rest_framework.x"``)."""
    assert core_violations(_all_imports(type_checking=True)) == []
    named = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}"
        for name, path in _modules().items()
        if name == CORE or name.startswith(f"{CORE}.")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and re.fullmatch(r"(django|rest_framework)(\.\w+)*", node.value)
    ]
    assert named == []


# -- the checks themselves, on made-up modules ------------------------------------------

KNOWN = {"pkg", "pkg.low", "pkg.high", "pkg.lazy"}
SAMPLE = """
from __future__ import annotations
from typing import TYPE_CHECKING
from . import low
if TYPE_CHECKING:
    from .high import Upper
if not TYPE_CHECKING:
    from .high import run_time
else:
    from .high import never
def f():
    from .high import later
    return low._hidden, low.__name__, low.thing._meta
__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)
_LAZY: dict[str, str] = {"name": ".high"}
"""


def test_imports_of_reads_every_import_that_runs() -> None:
    found = {
        (f.line, f.target, f.kind)
        for f in imports_of("pkg.mid", "pkg/mid.py", SAMPLE, KNOWN)
        if f.target.startswith("pkg")
    }
    assert found == {
        (4, "pkg.low", "module-level"),
        (8, "pkg.high", "module-level"),
        (12, "pkg.high", "function-level"),
        (15, "pkg.high", "lazy export"),
    }


def test_an_upward_function_level_import_is_named_with_its_line() -> None:
    imports = imports_of("pkg.low", "pkg/low.py", "def f():\n    from . import high\n", KNOWN)
    layers = {"pkg.low": (1, "bottom"), "pkg.high": (0, "top")}
    assert layer_violations(imports, layers) == [
        "pkg/low.py:2 (function-level) from . import high imports pkg.high of the layer "
        "'top' above 'bottom'"
    ]


def test_a_cycle_through_a_function_level_import_is_found() -> None:
    imports = [
        *imports_of("yieldstar_django.a", "a.py", "from . import b\n", {"yieldstar_django.b"}),
        *imports_of(
            "yieldstar_django.b", "b.py", "def f():\n    from .a import g\n", {"yieldstar_django.a"}
        ),
    ]
    (found,) = cycles(imports)
    assert "yieldstar_django.a -> yieldstar_django.b -> yieldstar_django.a" in found
    assert "b.py:2 (function-level) from .a import g" in found
    assert cycles(imports[:1]) == []


def test_private_names_of_another_module_are_found() -> None:
    uses = private_uses("pkg.mid", "pkg/mid.py", SAMPLE + "from .low import _y\n", KNOWN)
    assert uses == [
        "pkg/mid.py:13 low._hidden uses a private name of pkg.low",
        "pkg/mid.py:16 from .low import _y uses a private name of pkg.low",
    ]


def test_core_may_not_import_django_even_in_a_function() -> None:
    source = "def f():\n    from django.core.exceptions import ValidationError\n"
    imports = imports_of(f"{CORE}.x", "core/x.py", source, set())
    assert core_violations(imports) == [
        "core/x.py:2 (function-level) from django.core.exceptions import ValidationError "
        "imports django.core.exceptions"
    ]
