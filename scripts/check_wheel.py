"""Build the distributions of this checkout and check what the wheel holds.

``python scripts/check_wheel.py [OUTDIR]`` builds the sdist and the wheel with
``python -m build`` into OUTDIR (a temporary directory by default), runs ``twine check
--strict`` on both, and checks that the wheel holds exactly the files of the
``yieldstar_django`` package as git sees them (tracked or not ignored: its modules, SQL
files, templates, static files, ``py.typed``) plus its ``.dist-info`` metadata, with the
pytest plugin's entry point: no tests, no demo project, no scripts. Prints the wheel's
files by kind. ``scripts/check_startproject.py`` calls :func:`build_and_check` and installs
the wheel it returns. Needs the dev extra (``build``, ``twine``) and the package index
(``build`` installs the build backend in an isolated environment).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import zipfile
from collections import Counter
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "yieldstar_django"
#: Files the wheel must hold whatever else changes (the kinds a build may drop silently).
REQUIRED = (
    f"{PACKAGE}/py.typed",
    f"{PACKAGE}/sql/postgres_tables.sql",
    f"{PACKAGE}/templates/yieldstar_django/admin/store_change_form.html",
    f"{PACKAGE}/migrations/0001_initial.py",
)
ENTRY_POINT = "yieldstar_django = yieldstar_django.testing.pytest_plugin"


def version(root: Path = ROOT) -> str:
    """``yieldstar_django.__version__``, read from the source (not imported)."""
    text = (root / PACKAGE / "__init__.py").read_text(encoding="utf-8")
    found = re.search(r'^__version__ = "([^"]+)"$', text, re.M)
    if found is None:
        sys.exit(f"{PACKAGE}/__init__.py states no __version__")
    return found.group(1)


def package_files(root: Path = ROOT) -> set[str]:
    """The files of the package a build takes: git's tracked and unignored files."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", PACKAGE],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return {name for name in listed.split("\0") if name and (root / name).is_file()}


def build(root: Path, outdir: Path) -> tuple[Path, Path]:
    """``python -m build`` into ``outdir``: the (sdist, wheel) of the current version."""
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(outdir), str(root)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    stem = f"{PACKAGE}-{version(root)}"
    sdist, wheel = outdir / f"{stem}.tar.gz", outdir / f"{stem}-py3-none-any.whl"
    for path in (sdist, wheel):
        if not path.is_file():
            sys.exit(f"python -m build made no {path.name} (found {sorted(outdir.iterdir())})")
    return sdist, wheel


def wheel_problems(wheel: Path, expected: set[str]) -> list[str]:
    """What is wrong with the wheel's file list, given the package's files (none: [])."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        dist_info = wheel.name.removesuffix("-py3-none-any.whl") + ".dist-info"
        entry_points = archive.read(f"{dist_info}/entry_points.txt").decode()
    package = {name for name in names if not name.startswith(f"{dist_info}/")}
    problems = [f"missing: {name}" for name in sorted(expected - package)]
    problems += [f"not of the package: {name}" for name in sorted(package - expected)]
    problems += [f"missing: {name}" for name in REQUIRED if name not in names]
    if ENTRY_POINT not in entry_points:
        problems.append(f"no pytest11 entry point {ENTRY_POINT!r}")
    return problems


def summary(wheel: Path) -> str:
    """The wheel's files counted by kind (directory of non-Python files, or ``*.py``)."""
    with zipfile.ZipFile(wheel) as archive:
        names = [PurePosixPath(name) for name in archive.namelist()]
    kinds = Counter(
        "*.py" if path.suffix == ".py" else f"{path.parent}/*{path.suffix}" for path in names
    )
    return "\n".join(f"  {count:4d} {kind}" for kind, count in sorted(kinds.items()))


def build_and_check(outdir: Path, root: Path = ROOT) -> Path:
    """Build, ``twine check`` and check the wheel; the wheel's path. Exits on a problem."""
    sdist, wheel = build(root, outdir)
    subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(wheel)],
        check=True,
    )
    problems = wheel_problems(wheel, package_files(root))
    if problems:
        sys.exit(f"{wheel.name}:\n" + "\n".join(problems))
    print(f"{wheel.name}: the package's files and its metadata\n{summary(wheel)}", flush=True)
    return wheel


def main() -> None:
    if len(sys.argv) > 1:
        build_and_check(Path(sys.argv[1]).resolve())
        return
    with tempfile.TemporaryDirectory(prefix="yieldstar-wheel-") as outdir:
        build_and_check(Path(outdir))


if __name__ == "__main__":
    main()
