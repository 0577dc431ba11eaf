"""Result rows and the table every suite prints."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Series:
    """Raw data behind a row, for ``python -m bench --plot`` (``bench.plot``).

    ``figure`` names the plot it belongs to (a key of ``bench.plot.FIGURES``); ``label`` is
    its legend entry. With ``y`` empty, ``x`` holds samples (drawn as a CDF); otherwise
    ``x`` and ``y`` are the points of a line.
    """

    figure: str
    label: str
    x: list[float]
    y: list[float] = field(default_factory=list)


@dataclass
class Row:
    """One measured figure against its baseline: ``ratio = value / baseline`` per ``unit``.

    ``series``: the raw data a plot of it needs, if any (not printed in the tables).
    """

    suite: str
    name: str
    value: float
    baseline_name: str
    baseline: float
    unit: str
    target: str = ""
    note: str = ""
    series: list[Series] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.value / self.baseline if self.baseline else float("nan")


def best_of(fn: Callable[[], object], *, repeat: int = 5, number: int = 1) -> float:
    """Median seconds per call of ``fn`` over ``repeat`` rounds of ``number`` calls."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number)
    return statistics.median(samples)


def format_table(rows: list[Row]) -> str:
    header = ("suite", "figure", "value", "baseline", "ratio", "target", "note")
    lines = [header]
    for r in rows:
        lines.append(
            (
                r.suite,
                r.name,
                f"{r.value:,.4g} {r.unit}",
                f"{r.baseline:,.4g} {r.unit} ({r.baseline_name})",
                f"{r.ratio:.2f}x",
                r.target,
                r.note,
            )
        )
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    out = []
    for index, line in enumerate(lines):
        out.append(" | ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(line)).rstrip())
        if index == 0:
            out.append("-|-".join("-" * w for w in widths))
    return "\n".join(out)


def format_markdown(rows: list[Row]) -> str:
    out = [
        "| suite | figure | value | baseline | ratio | target | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r.suite} | {r.name} | {r.value:,.4g} {r.unit} | {r.baseline:,.4g} {r.unit} "
            f"({r.baseline_name}) | {r.ratio:.2f}x | {r.target} | {r.note} |"
        )
    return "\n".join(out)
