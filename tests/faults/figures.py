"""The fault suite's figures: what each test's ``Faults.verify`` recorded, printed at the
end of the run and appended to ``var/faults/figures.jsonl``.

Under pytest-xdist each worker hands its figures to the controller (``workeroutput``), which
prints them all; the hooks that do it are in ``tests/conftest.py`` (the controller loads no
conftest below ``tests``). ``YIELDSTAR_FAULT_FIGURES_DIR`` names another directory for the
file (``tests/faults/test_figures.py`` runs the hooks on figures of its own).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from tests.paths import ROOT

#: The key of a worker's figures in its ``workeroutput``.
WORKER_KEY = "yieldstar_fault_figures"
FIGURES: list[dict[str, Any]] = []


def percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile of ``values`` (``fraction`` 0.95: the p95)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


def write_summary(terminalreporter: Any) -> None:
    """Print the figures of this run and append them to ``var/faults/figures.jsonl``."""
    if not FIGURES:
        return
    out = Path(os.environ.get("YIELDSTAR_FAULT_FIGURES_DIR") or ROOT / "var" / "faults")
    out.mkdir(parents=True, exist_ok=True)
    terminalreporter.section("fault suite figures")
    with (out / "figures.jsonl").open("a") as handle:
        for figure in FIGURES:
            rec = [round(r, 3) for r in figure["recoveries"]]
            handle.write(json.dumps({**figure, "recoveries": rec, "at": time.time()}) + "\n")
            summary = (
                f"recovery p50 {statistics.median(rec):.2f}s p95 {percentile(rec, 0.95):.2f}s "
                f"(n={len(rec)})"
                if rec
                else "no recovery measured"
            )
            terminalreporter.write_line(
                f"{figure['fault']}: {figure['executions']} executions, "
                f"{figure['operations']} store operations, {figure['anomalies']} anomalies, "
                f"{figure['not_completed']} not completed; {summary}"
                + (f"; {figure['detail']}" if figure.get("detail") else "")
            )
