"""Audit the installed dependencies for known vulnerabilities (scripts/test.sh runs it).

What is audited: the distributions installed in the environment this script runs in
(the project itself, installed editable, left out). ``scripts/test.sh`` runs it in the
environment the project's own install produced (``pip install -e '.[dev]'``, see
``scripts/_venv.sh``), so it audits exactly the versions the tests ran against. The
project is a library and pins nothing (a project that installs it resolves its own
versions), so there is no lock file: that installed set is the locked set.

Where the advisories come from, first that answers:

1. ``pip-audit``'s vulnerability services, PyPI's then OSV's (current, but they need the
   network);
2. a local copy of an OSV-format advisory database, ``--advisories PATH`` or the
   ``YIELDSTAR_ADVISORY_DB`` environment variable: the PyPA advisory database
   (``github.com/pypa/advisory-database``), as a checkout (its root or its ``vulns``
   folder), a bare git repository of it (read at ``HEAD`` with ``git``), or any folder
   with one subfolder per package holding OSV files (``.yaml``, ``.yml``, ``.json``). A
   local copy is only as current as its last update: the step prints its date.

``pip-audit`` cannot do the second itself: its ``--vulnerability-service`` is one of
``pypi``, ``osv`` and ``esms``, three network services, and ``--osv-url`` only moves the
OSV query service; it has no mode that reads advisories from disk. So the local audit is
done here, by the OSV schema's rules: an installed version is affected when an advisory
of the ``PyPI`` ecosystem for its package lists it under ``versions`` or falls in one of
its ``ECOSYSTEM`` ranges (after an ``introduced`` event, until the next ``fixed`` event
or past a ``last_affected`` one), the versions compared by PEP 440 (``packaging``).
Withdrawn advisories are left out. Distributions that the service did not audit go to
the local database when there is one.

Outcome:

- fails (exit 1) when an installed version has a known vulnerability that
  ``.pip-audit-ignore`` does not accept, or when that file has a line without a reason;
- passes when none is found, naming the accepted ones that matched (with their reason)
  and the distributions no source knew;
- skips (exit 0, saying why) when no source could audit anything (no service reached, no
  local database). With ``YIELDSTAR_AUDIT_REQUIRED=1`` that is a failure instead (exit
  1), for a CI that must audit.

``.pip-audit-ignore`` at the project root lists the accepted vulnerabilities, one a
line: an id the finding is known by (``PYSEC-...``, ``GHSA-...``, ``CVE-...``: its own
or one of its aliases), then the reason it is accepted (required); ``#`` starts a comment
line.

    python scripts/audit_dependencies.py                     # services, then the local copy
    python scripts/audit_dependencies.py --offline --advisories ~/advisory-database
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parent.parent
IGNORE_FILE = ROOT / ".pip-audit-ignore"
#: The project itself (installed editable): not a dependency.
PROJECT = canonicalize_name("yieldstar-django")
#: pip-audit's services, tried in this order.
SERVICES = ("pypi", "osv")
OSV_SUFFIXES = (".yaml", ".yml", ".json")


class AuditError(Exception):
    """A problem with the audit's own input (the ignore file, the advisory database)."""


@dataclass(frozen=True)
class Finding:
    """An installed distribution's version that an advisory names."""

    name: str
    version: str
    id: str
    aliases: tuple[str, ...] = ()
    fixed_in: tuple[str, ...] = ()

    def known_as(self) -> set[str]:
        return {self.id, *self.aliases}


@dataclass
class Audit:
    """What one source said: the distributions it audited and what it found in them."""

    source: str
    audited: set[str] = field(default_factory=set)
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# --- the ignore file --------------------------------------------------------------------------


def accepted_vulnerabilities(path: Path = IGNORE_FILE) -> dict[str, str]:
    """``{id: reason}`` from the ignore file; a line without a reason is an error."""
    accepted: dict[str, str] = {}
    if not path.exists():
        return accepted
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        vuln_id, _, reason = text.partition(" ")
        if not reason.strip():
            raise AuditError(f"{path.name}:{number}: {vuln_id} needs a reason after its id")
        accepted[vuln_id] = reason.strip()
    return accepted


# --- the installed set ------------------------------------------------------------------------


def installed_distributions() -> dict[str, tuple[str, str]]:
    """``{canonical name: (name, version)}`` of the running environment, the project left
    out (the first of a name on ``sys.path`` wins, as for imports)."""
    found: dict[str, tuple[str, str]] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if not name:
            continue
        key = canonicalize_name(name)
        if key != PROJECT and key not in found:
            found[key] = (name, dist.version)
    return found


# --- OSV matching -----------------------------------------------------------------------------


def parse_version(text: Any) -> Version | None:
    try:
        return Version(str(text))
    except InvalidVersion:
        return None


def in_range(version: Version, events: Iterable[dict[str, Any]]) -> bool:
    """Whether ``version`` falls in an OSV ``ECOSYSTEM`` range with these ``events``: the
    events sorted by version (``introduced: "0"`` first), the last one at or below the
    version decides (``introduced``: affected; ``fixed``: not; ``last_affected``: not,
    once the version is past it). An event whose version PEP 440 cannot read is an
    :class:`AuditError` (the range cannot be decided either way)."""
    bounds: list[tuple[int, Version | None, str]] = []
    for event in events:
        for kind in ("introduced", "fixed", "last_affected"):
            if kind not in event:
                continue
            raw = str(event[kind])
            if kind == "introduced" and raw == "0":
                bounds.append((0, None, kind))  # before every version
                continue
            bound = parse_version(raw)
            if bound is None:
                raise AuditError(f"{kind} {raw!r} is not a PEP 440 version")
            bounds.append((1, bound, kind))
    bounds.sort(key=lambda b: (b[0], b[1] or Version("0")))
    affected = False
    for _, bound, kind in bounds:
        if bound is not None and version < bound:
            break  # sorted: neither this event nor a later one is at or below the version
        if kind == "introduced":
            affected = True
        elif kind == "fixed" or (bound is not None and version > bound):  # last_affected
            affected = False
    return affected


def match_advisory(advisory: dict[str, Any], name: str, version: str) -> Finding | None:
    """The finding when the OSV ``advisory`` affects ``version`` of the distribution
    ``name`` (canonical), else ``None``."""
    if advisory.get("withdrawn"):
        return None
    installed = parse_version(version)
    if installed is None:
        return None  # not a PEP 440 version: no PyPI advisory can name it
    hit = False
    fixes: set[str] = set()
    for entry in advisory.get("affected") or []:
        package = entry.get("package") or {}
        if package.get("ecosystem") != "PyPI":
            continue
        if canonicalize_name(str(package.get("name", ""))) != name:
            continue
        listed = {parse_version(v) for v in entry.get("versions") or []}
        entry_hit = installed in listed
        for rng in entry.get("ranges") or []:
            if rng.get("type") != "ECOSYSTEM":
                continue
            events = rng.get("events") or []
            try:
                if in_range(installed, events):
                    entry_hit = True
            except AuditError as exc:
                raise AuditError(f"{advisory.get('id')}: {exc}") from None
            for event in events:
                fixed = parse_version(event.get("fixed", ""))
                if fixed is not None and fixed > installed:
                    fixes.add(str(fixed))
        hit = hit or entry_hit
    if not hit:
        return None
    return Finding(
        name=name,
        version=version,
        id=str(advisory.get("id")),
        aliases=tuple(str(a) for a in advisory.get("aliases") or []),
        fixed_in=tuple(sorted(fixes, key=Version)),
    )


# --- the local database -----------------------------------------------------------------------


def load_osv(text: bytes, suffix: str) -> dict[str, Any]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's when there
    data = json.loads(text) if suffix == ".json" else yaml.load(text, Loader=loader)
    if not isinstance(data, dict):
        raise AuditError("not an OSV record (a mapping)")
    return data


def is_bare_git(path: Path) -> bool:
    return (path / "HEAD").is_file() and (path / "objects").is_dir()


def folder_records(root: Path, wanted: set[str]) -> Iterator[tuple[str, str, bytes]]:
    """``(package folder, file name, content)`` of the OSV files in the folders of the
    ``wanted`` packages under ``root`` (or ``root/vulns``)."""
    base = root / "vulns" if (root / "vulns").is_dir() else root
    for folder in sorted(base.iterdir()):
        if folder.is_dir() and canonicalize_name(folder.name) in wanted:
            for file in sorted(folder.iterdir()):
                if file.suffix in OSV_SUFFIXES and file.is_file():
                    yield folder.name, file.name, file.read_bytes()


def git(repo: Path, *args: str) -> bytes:
    done = subprocess.run(
        ["git", "--git-dir", str(repo), *args], capture_output=True, timeout=300, check=False
    )
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip()
        raise AuditError(f"git {' '.join(args[:2])} in {repo}: {message}")
    return done.stdout


def git_records(repo: Path, wanted: set[str]) -> Iterator[tuple[str, str, bytes]]:
    """The same from a bare git repository of the database, at its ``HEAD``."""
    names = git(repo, "ls-tree", "--name-only", "HEAD", "vulns/").decode().split()
    folders = [n for n in names if canonicalize_name(n.split("/", 1)[1]) in wanted]
    if not folders:
        return
    archive = git(repo, "archive", "--format=tar", "HEAD", "--", *folders)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            path = Path(member.name)
            if member.isfile() and path.suffix in OSV_SUFFIXES:
                content = tar.extractfile(member)
                assert content is not None
                yield path.parent.name, path.name, content.read()


def local_audit(database: Path, installed: dict[str, tuple[str, str]]) -> Audit:
    """Audit ``installed`` against the OSV files of a local advisory database."""
    if is_bare_git(database):
        date = git(database, "log", "-1", "--format=%cs", "HEAD").decode().strip()
        audit = Audit(f"the advisory database in {database} (git HEAD of {date})")
        records = git_records(database, set(installed))
    elif database.is_dir():
        audit = Audit(f"the advisory database in {database}")
        records = folder_records(database, set(installed))
    else:
        raise AuditError(f"no advisory database at {database}")
    newest = ""
    for folder, file_name, content in records:
        try:
            advisory = load_osv(content, Path(file_name).suffix)
        except (ValueError, yaml.YAMLError, AuditError) as exc:
            raise AuditError(f"{folder}/{file_name}: unreadable: {exc}") from None
        newest = max(newest, str(advisory.get("modified", "")))
        for key, (_, version) in installed.items():
            if canonicalize_name(folder) != key:
                continue
            finding = match_advisory(advisory, key, version)
            if finding is not None:
                audit.findings.append(finding)
    audit.audited = set(installed)
    if newest:
        audit.notes.append(f"newest advisory read: modified {newest[:10]}")
    return audit


# --- pip-audit's services ---------------------------------------------------------------------


def service_audit(service: str) -> Audit | str:
    """pip-audit against ``service``: what it audited, or why it audited nothing."""
    command = [
        sys.executable, "-m", "pip_audit", "--skip-editable", "--format", "json",
        "--progress-spinner", "off", "--vulnerability-service", service,
    ]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return f"pip-audit ({service}) did not finish in 10 minutes"
    try:
        report: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        if "No module named pip_audit" in done.stderr:
            return "pip-audit is not installed (the dev extra has it)"
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"pip-audit ({service}) could not reach its service: {tail[:300]}"
    audit = Audit(f"pip-audit's {service} service")
    for dependency in report.get("dependencies", []):
        if dependency.get("skip_reason"):
            continue
        name = canonicalize_name(dependency["name"])
        audit.audited.add(name)
        for vuln in dependency.get("vulns") or []:
            audit.findings.append(
                Finding(
                    name=name,
                    version=dependency["version"],
                    id=vuln["id"],
                    aliases=tuple(vuln.get("aliases") or []),
                    fixed_in=tuple(vuln.get("fix_versions") or []),
                )
            )
    if not audit.audited:
        return f"pip-audit's {service} service knew none of the installed distributions"
    return audit


# --- the run ----------------------------------------------------------------------------------


def skip(reason: str) -> int:
    if os.environ.get("YIELDSTAR_AUDIT_REQUIRED") == "1":
        print(f"dependency audit FAILED: {reason} (YIELDSTAR_AUDIT_REQUIRED=1)")
        return 1
    print(f"dependency audit SKIPPED: {reason}")
    return 0


def run(database: Path | None, offline: bool, ignore_file: Path) -> int:
    accepted = accepted_vulnerabilities(ignore_file)
    installed = installed_distributions()
    audits: list[Audit] = []
    reasons: list[str] = []
    if not offline:
        for service in SERVICES:
            answer = service_audit(service)
            if isinstance(answer, Audit):
                audits.append(answer)
                break
            reasons.append(answer)
    left = {k: v for k, v in installed.items() if not any(k in a.audited for a in audits)}
    if left and database is not None:
        audits.append(local_audit(database, left))
    elif left:
        reasons.append("no local advisory database (--advisories or YIELDSTAR_ADVISORY_DB)")
    if not audits:
        return skip("; ".join(reasons))

    for reason in reasons:
        print(f"not used: {reason}")
    failed = 0
    used: set[str] = set()
    for audit in audits:
        print(f"audited {len(audit.audited)} distributions with {audit.source}")
        for note in audit.notes:
            print(f"  {note}")
        for finding in sorted(audit.findings, key=lambda f: (f.name, f.id)):
            names = sorted(finding.known_as() & set(accepted))
            label = f"{finding.name} {finding.version}: {finding.id}"
            also = f" ({', '.join(finding.aliases)})" if finding.aliases else ""
            if names:
                used.update(names)
                print(f"accepted {label}{also}: {accepted[names[0]]}")
            else:
                failed += 1
                fixes = ", ".join(finding.fixed_in) or "none yet"
                print(f"VULNERABLE {label}{also}, fixed in: {fixes}")
    for vuln_id in sorted(set(accepted) - used):
        print(f"note: {vuln_id} in {ignore_file.name} matched nothing installed")
    unknown = sorted(set(installed) - set().union(*(a.audited for a in audits)))
    if unknown:
        print(f"not audited (no source knew them): {', '.join(unknown)}")
    if failed:
        print(
            f"dependency audit FAILED: {failed} known vulnerabilities in the installed "
            f"versions; upgrade them, or accept one in {ignore_file.name} with a reason"
        )
        return 1
    print(f"dependency audit passed: {len(installed) - len(unknown)} distributions audited")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--advisories",
        type=Path,
        default=os.environ.get("YIELDSTAR_ADVISORY_DB") or None,
        help="a local OSV advisory database (default: $YIELDSTAR_ADVISORY_DB)",
    )
    parser.add_argument(
        "--offline", action="store_true", help="do not try pip-audit's network services"
    )
    parser.add_argument("--ignore-file", type=Path, default=IGNORE_FILE)
    args = parser.parse_args(argv)
    try:
        return run(args.advisories, args.offline, args.ignore_file)
    except AuditError as exc:
        print(f"dependency audit FAILED: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
