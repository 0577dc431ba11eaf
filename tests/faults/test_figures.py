"""The fault suite's figures reach the xdist controller (``tests/conftest.py``'s hooks).

A pytest run of its own, on two workers, of tests that each record a figure as
``Faults.verify`` does: the controller prints every worker's figures once and appends them
to the figures file; a worker prints none.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.paths import ROOT

PROBE = """
import os

import pytest

from tests.faults import figures


@pytest.mark.parametrize("n", [1, 2, 3])
def test_records_a_figure(n):
    worker = os.environ["PYTEST_XDIST_WORKER"]
    figures.FIGURES.append(
        {"fault": f"probe-{n}-{worker}", "executions": n, "operations": 0, "anomalies": 0,
         "not_completed": 0, "recoveries": [0.5, 1.5]}
    )
"""


def test_every_workers_figures_are_printed_and_kept_once(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import (  # noqa: F401\n"
        "    pytest_sessionfinish, pytest_terminal_summary, pytest_testnodedown,\n"
        ")\n"
    )
    (tmp_path / "test_probe.py").write_text(textwrap.dedent(PROBE))
    out = tmp_path / "figures"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},  # ours: xdist's
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "YIELDSTAR_FAULT_FIGURES_DIR": str(out),
    }
    args = ["-n", "2", "--dist", "each", "-p", "no:cacheprovider", "--rootdir", str(tmp_path)]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *args, str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    expected = {f"probe-{n}-{worker}" for n in (1, 2, 3) for worker in ("gw0", "gw1")}
    printed = [line for line in run.stdout.splitlines() if line.startswith("probe-")]
    assert sorted(line.split(":")[0] for line in printed) == sorted(expected), run.stdout
    assert "recovery p50 1.00s" in printed[0]
    kept = [json.loads(line) for line in (out / "figures.jsonl").read_text().splitlines()]
    assert sorted(figure["fault"] for figure in kept) == sorted(expected)
