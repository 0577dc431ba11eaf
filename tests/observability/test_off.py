"""With tracing and metrics off, or their libraries absent, a process that runs workflows
imports nothing of OpenTelemetry or prometheus-client (a fresh interpreter each)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import ROOT


def _run(tmp_path: Path, mode: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.observability.no_import_script",
         str(tmp_path / "db.sqlite3"), mode],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("mode", ["off", "absent"])
def test_nothing_is_imported(tmp_path: Path, mode: str) -> None:
    result = _run(tmp_path, mode)
    assert result["status"] == "completed"
    assert result["result"] == "42"
    assert result["trace_context"] == ""
    assert result["imported"] == []


def test_on_by_default_when_the_libraries_are_there(tmp_path: Path) -> None:
    """The same run with the settings unset: both are imported (what the two above rule out
    can happen)."""
    result = _run(tmp_path, "default")
    assert result["status"] == "completed"
    assert {"opentelemetry", "prometheus_client"} <= {
        str(name).split(".")[0]
        for name in result["imported"]  # type: ignore[attr-defined]
    }
