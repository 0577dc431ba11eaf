"""``scripts/audit_dependencies.py`` against a local OSV advisory database: the installed
versions an advisory names fail the audit, accepted ones pass with their reason, and the
OSV ranges are read by the schema's rules. Always ``--offline``: no network."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "audit_dependencies.py"
DJANGO = metadata.version("django")


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("audit_dependencies", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # for its dataclasses
    spec.loader.exec_module(module)
    return module


audit = load_script()


def advisory(
    vuln_id: str,
    name: str,
    events: list[dict[str, str]] | None = None,
    versions: list[str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    entry: dict[str, Any] = {"package": {"ecosystem": "PyPI", "name": name}}
    if events is not None:
        entry["ranges"] = [{"type": "ECOSYSTEM", "events": events}]
    if versions is not None:
        entry["versions"] = versions
    return {"id": vuln_id, "modified": "2026-01-02T00:00:00Z", "affected": [entry], **extra}


def write_database(root: Path, *advisories: dict[str, Any]) -> Path:
    for record in advisories:
        folder = root / "vulns" / record["affected"][0]["package"]["name"].lower()
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{record['id']}.yaml").write_text(yaml.safe_dump(record))
    return root


def run_audit(
    tmp: Path, database: Path | None, ignore: str = "", required: bool = False
) -> subprocess.CompletedProcess[str]:
    """The script, offline, with ``ignore`` as its ignore file."""
    ignore_file = tmp / "ignore"
    ignore_file.write_text(ignore)
    command = [sys.executable, str(SCRIPT), "--offline", "--ignore-file", str(ignore_file)]
    if database is not None:
        command += ["--advisories", str(database)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("YIELDSTAR_A")}
    if required:
        env["YIELDSTAR_AUDIT_REQUIRED"] = "1"
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)


def next_major(version: str) -> str:
    return f"{int(version.split('.')[0]) + 1}.0"


def test_an_advisory_naming_the_installed_version_fails_the_audit(tmp_path: Path) -> None:
    database = write_database(
        tmp_path / "db",
        advisory(
            "PYSEC-0000-1",
            "Django",
            [{"introduced": "0"}, {"fixed": next_major(DJANGO)}],
            aliases=["CVE-0000-1"],
        ),
    )
    done = run_audit(tmp_path, database)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"VULNERABLE django {DJANGO}: PYSEC-0000-1 (CVE-0000-1)" in done.stdout
    assert f"fixed in: {next_major(DJANGO)}" in done.stdout
    assert "dependency audit FAILED" in done.stdout


def test_an_advisory_fixed_at_the_installed_version_passes(tmp_path: Path) -> None:
    database = write_database(
        tmp_path / "db",
        advisory("PYSEC-0000-2", "django", [{"introduced": "0"}, {"fixed": DJANGO}]),
    )
    done = run_audit(tmp_path, database)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "VULNERABLE" not in done.stdout
    assert "dependency audit passed" in done.stdout
    assert "newest advisory read: modified 2026-01-02" in done.stdout


@pytest.mark.parametrize("accepted_as", ["PYSEC-0000-3", "CVE-0000-3"])
def test_an_accepted_vulnerability_passes_with_its_reason(tmp_path: Path, accepted_as: str) -> None:
    """Accepted by its id or by an alias; the reason is printed with it."""
    database = write_database(
        tmp_path / "db",
        advisory("PYSEC-0000-3", "django", versions=[DJANGO], aliases=["CVE-0000-3"]),
    )
    ignore = f"# a comment\n\n{accepted_as}   not reachable here; revisit 2027-01\n"
    done = run_audit(tmp_path, database, ignore=ignore)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        f"accepted django {DJANGO}: PYSEC-0000-3 (CVE-0000-3): not reachable here; "
        "revisit 2027-01" in done.stdout
    )


def test_an_accepted_id_without_a_reason_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "db" / "vulns").mkdir(parents=True)
    done = run_audit(tmp_path, tmp_path / "db", ignore="PYSEC-0000-4\n")
    assert done.returncode == 1
    assert "ignore:1: PYSEC-0000-4 needs a reason after its id" in done.stdout


def test_the_repository_ignore_file_gives_every_id_a_reason() -> None:
    accepted = audit.accepted_vulnerabilities(audit.IGNORE_FILE)
    assert all(reason.strip() for reason in accepted.values())


def test_a_bare_git_repository_of_the_database_is_read_at_head(tmp_path: Path) -> None:
    """The PyPA database as a bare git repository (a mirror) is read at its ``HEAD``."""
    work = write_database(
        tmp_path / "work",
        advisory("PYSEC-0000-5", "django", [{"introduced": "0"}, {"last_affected": DJANGO}]),
    )
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "advisories"]):
        subprocess.run([*git, *args], cwd=work, check=True, capture_output=True)
    subprocess.run(
        ["git", "clone", "-q", "--bare", str(work), str(tmp_path / "bare.git")],
        check=True,
        capture_output=True,
    )
    done = run_audit(tmp_path, tmp_path / "bare.git")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "(git HEAD of " in done.stdout
    assert f"VULNERABLE django {DJANGO}: PYSEC-0000-5" in done.stdout


def test_without_a_source_the_audit_skips_or_fails_when_required(tmp_path: Path) -> None:
    done = run_audit(tmp_path, None)
    assert done.returncode == 0
    assert "dependency audit SKIPPED: no local advisory database" in done.stdout
    done = run_audit(tmp_path, None, required=True)
    assert done.returncode == 1
    assert "YIELDSTAR_AUDIT_REQUIRED=1" in done.stdout


def test_an_unreadable_advisory_fails_the_audit(tmp_path: Path) -> None:
    folder = tmp_path / "db" / "vulns" / "django"
    folder.mkdir(parents=True)
    (folder / "PYSEC-0000-6.yaml").write_text("- not a record\n")
    done = run_audit(tmp_path, tmp_path / "db")
    assert done.returncode == 1
    assert "django/PYSEC-0000-6.yaml: unreadable" in done.stdout


# --- OSV ranges -------------------------------------------------------------------------------

TWO_INTERVALS = [
    {"introduced": "1.0"},
    {"fixed": "1.5"},
    {"introduced": "2.0"},
    {"fixed": "2.3.1"},
]


@pytest.mark.parametrize(
    ("events", "version", "affected"),
    [
        ([{"introduced": "0"}, {"fixed": "2.0"}], "0.0.1", True),
        ([{"introduced": "0"}, {"fixed": "2.0"}], "1.9.9", True),
        ([{"introduced": "0"}, {"fixed": "2.0"}], "2.0", False),
        ([{"introduced": "0"}, {"fixed": "2.0"}], "2.0.0", False),  # PEP 440: 2.0 == 2.0.0
        ([{"introduced": "0"}, {"fixed": "2.0"}], "2.0rc1", True),  # before the fix
        ([{"introduced": "0"}, {"fixed": "2.0"}], "2.0.post1", False),
        ([{"introduced": "0"}], "99.0", True),  # no fix yet
        (TWO_INTERVALS, "0.9", False),
        (TWO_INTERVALS, "1.0", True),
        (TWO_INTERVALS, "1.4.99", True),
        (TWO_INTERVALS, "1.5", False),
        (TWO_INTERVALS, "1.10", False),  # between the intervals (not 1.1 < 1.10 as text)
        (TWO_INTERVALS, "2.3.0", True),
        (TWO_INTERVALS, "2.3.1", False),
        (list(reversed(TWO_INTERVALS)), "2.1", True),  # events in any order
        ([{"introduced": "1.2"}, {"last_affected": "1.4"}], "1.1", False),
        ([{"introduced": "1.2"}, {"last_affected": "1.4"}], "1.2", True),
        ([{"introduced": "1.2"}, {"last_affected": "1.4"}], "1.4", True),
        ([{"introduced": "1.2"}, {"last_affected": "1.4"}], "1.4.1", False),
        ([{"introduced": "1.2"}, {"last_affected": "1.4"}], "1.4.post1", False),
        ([{"introduced": "1.2"}], "1.2.dev0", False),  # a dev release comes before 1.2
    ],
)
def test_ranges_follow_the_osv_rules(
    events: list[dict[str, str]], version: str, affected: bool
) -> None:
    assert audit.in_range(audit.Version(version), events) is affected


def test_an_unreadable_bound_is_an_error_not_a_pass() -> None:
    with pytest.raises(audit.AuditError, match="not a PEP 440 version"):
        audit.in_range(audit.Version("1.0"), [{"introduced": "0"}, {"fixed": "next one"}])


def test_matching_reads_versions_ranges_package_and_withdrawal() -> None:
    record = advisory("X-1", "Foo_Bar", [{"introduced": "2.0"}], versions=["1.0"])
    assert audit.match_advisory(record, "foo-bar", "1.0") is not None  # listed
    assert audit.match_advisory(record, "foo-bar", "1.0.0") is not None  # same version
    assert audit.match_advisory(record, "foo-bar", "1.1") is None
    assert audit.match_advisory(record, "foo-bar", "2.5") is not None  # in the range
    assert audit.match_advisory(record, "other", "1.0") is None  # another package
    withdrawn = {**record, "withdrawn": "2026-01-01T00:00:00Z"}
    assert audit.match_advisory(withdrawn, "foo-bar", "1.0") is None
    other_ecosystem = advisory("X-2", "foo-bar", versions=["1.0"])
    other_ecosystem["affected"][0]["package"]["ecosystem"] = "npm"
    assert audit.match_advisory(other_ecosystem, "foo-bar", "1.0") is None
    fixed = advisory(
        "X-3",
        "foo",
        [{"introduced": "2.0"}, {"fixed": "2.5"}, {"introduced": "0"}, {"fixed": "1.2"}],
    )
    finding = audit.match_advisory(fixed, "foo", "1.0")
    assert finding is not None and finding.fixed_in == ("1.2", "2.5")
