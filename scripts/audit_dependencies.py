"""Audit the installed dependencies for known vulnerabilities (scripts/test.sh runs it).

Runs ``pip-audit`` over the environment it runs in (the project itself, installed
editable, is left out) against its default vulnerability service (PyPI's), and:

- fails (exit 1) when an installed version has a known vulnerability that
  ``.pip-audit-ignore`` does not accept;
- passes, naming them, when the service knows some installed versions but not others
  (a package or version it has no record of cannot be audited);
- skips (exit 0, saying why) when no dependency could be audited: the service could not
  be reached, or answered for none of the installed versions. With
  ``YIELDSTAR_AUDIT_REQUIRED=1`` that is a failure instead (exit 1), for a CI that must
  audit.

``.pip-audit-ignore`` at the project root lists the accepted vulnerabilities, one a
line: its id as pip-audit reports it (``PYSEC-...``, ``GHSA-...``, ``CVE-...``), then the
reason it is accepted (required); ``#`` starts a comment line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
IGNORE_FILE = ROOT / ".pip-audit-ignore"


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
            raise SystemExit(f"{path.name}:{number}: {vuln_id} needs a reason after its id")
        accepted[vuln_id] = reason.strip()
    return accepted


def skip(reason: str) -> int:
    if os.environ.get("YIELDSTAR_AUDIT_REQUIRED") == "1":
        print(f"dependency audit FAILED: {reason} (YIELDSTAR_AUDIT_REQUIRED=1)")
        return 1
    print(f"dependency audit SKIPPED: {reason}")
    return 0


def main() -> int:
    accepted = accepted_vulnerabilities()
    command = [
        sys.executable, "-m", "pip_audit", "--skip-editable", "--format", "json",
        "--progress-spinner", "off",
        *[arg for vuln_id in sorted(accepted) for arg in ("--ignore-vuln", vuln_id)],
    ]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return skip("pip-audit did not finish in 10 minutes (is its service reachable?)")
    try:
        report: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        if "No module named pip_audit" in done.stderr:
            print("dependency audit FAILED: pip-audit is not installed (the dev extra has it)")
            return 1
        return skip(f"pip-audit could not reach its vulnerability service: {tail}")
    dependencies = report.get("dependencies", [])
    skipped = [d for d in dependencies if d.get("skip_reason")]
    audited = [d for d in dependencies if not d.get("skip_reason")]
    vulnerable = [d for d in audited if d.get("vulns")]
    for dependency in vulnerable:
        for vuln in dependency["vulns"]:
            fixes = ", ".join(vuln.get("fix_versions") or []) or "none yet"
            print(
                f"VULNERABLE {dependency['name']} {dependency['version']}: {vuln['id']} "
                f"(fixed in: {fixes}) {' '.join(vuln.get('aliases') or [])}"
            )
    for vuln_id, reason in sorted(accepted.items()):
        print(f"accepted {vuln_id}: {reason}")
    if vulnerable:
        print(
            f"dependency audit FAILED: {len(vulnerable)} installed package(s) have known "
            f"vulnerabilities; upgrade them, or accept one in {IGNORE_FILE.name} with a reason"
        )
        return 1
    if not audited:
        return skip(
            f"the vulnerability service had no record of any of the {len(skipped)} installed "
            "distributions (unreachable, or a package index it does not know)"
        )
    if skipped:
        names = ", ".join(sorted(d["name"] for d in skipped))
        print(f"not audited (unknown to the service): {names}")
    print(f"dependency audit passed: {len(audited)} audited, {len(skipped)} not known")
    return 0


if __name__ == "__main__":
    sys.exit(main())
