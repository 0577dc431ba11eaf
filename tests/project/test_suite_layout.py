"""The test suite's layout (CONTRIBUTING.md, "Test layout"): every test file is in the
directory of the part it tests, and no two test files share a name (``-k``, tracebacks and
a CI report name files by their name alone)."""

from __future__ import annotations

from collections import defaultdict

from tests.paths import ROOT

TESTS = ROOT / "tests"

#: The parts, each a directory of tests (``shared`` holds what several of them use).
PARTS = {
    "core",
    "connector",
    "wakes",
    "runtime",
    "api",
    "admin",
    "observability",
    "testing",
    "project",
    "e2e",
    "faults",
    "browser",
}


def _test_files() -> list[str]:
    return sorted(str(path.relative_to(TESTS)) for path in TESTS.rglob("test_*.py"))


def test_no_two_test_files_share_a_name() -> None:
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in _test_files():
        by_name[path.rsplit("/", 1)[-1]].append(path)
    assert {name: paths for name, paths in by_name.items() if len(paths) > 1} == {}


def test_every_test_file_is_in_a_part_contributing_describes() -> None:
    outside = [path for path in _test_files() if path.split("/")[0] not in PARTS]
    assert outside == [], "test files outside the parts of CONTRIBUTING.md's layout"
    guide = (ROOT / "CONTRIBUTING.md").read_text()
    assert sorted(part for part in PARTS if f"tests/{part}/" not in guide) == []
