"""``python -m bench --plot``: the figures of the performance page, as PNGs in ``docs/img``.

Suites attach the raw data of a figure to their rows (``Row.series``, a list of
:class:`~bench.table.Series`); :func:`write_plots` draws one PNG per figure that has data,
so ``--plot --only connector`` redraws the connector's figures and leaves the others as
they are. Matplotlib (the ``bench`` extra) draws on its Agg canvas: no display needed.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .table import Row, Series

ROOT = Path(__file__).resolve().parent.parent
#: Where ``python -m bench --plot`` writes (the performance page shows these files).
DEFAULT_DIR = ROOT / "docs" / "img"
#: 800 x 500 pixels.
SIZE = (8.0, 5.0)
#: A CDF's size: taller, for its legend of one line per curve under the frame.
CDF_SIZE = (8.0, 6.5)
DPI = 100


@dataclass(frozen=True)
class Figure:
    """How one figure is drawn: its file, title and axes."""

    filename: str
    title: str
    xlabel: str
    ylabel: str
    xscale: str = "linear"
    #: The series hold samples (``Series.y`` empty), drawn as empirical CDFs.
    cdf: bool = False
    #: Tick marks at every x of the data (few, meaningful x values: counts of things).
    xticks_at_data: bool = False
    ymin_zero: bool = True
    #: The unit of the samples of a CDF (its legend gives their median).
    unit: str = ""


FIGURES: dict[str, Figure] = {
    "wake-latency": Figure(
        "bench-wake-latency.png",
        "Wake latency: a commit (or a send) to the woken code running",
        "latency (ms, log scale)",
        "fraction of wakes at or below",
        xscale="log",
        cdf=True,
        unit="ms",
    ),
    "commit-cost": Figure(
        "bench-commit-cost.png",
        "Cost of one store commit against the waiters registered on the store",
        "waiters on the store (symlog scale)",
        "time per commit (ms, median of rounds)",
        xscale="symlog",
        xticks_at_data=True,
    ),
    "contention": Figure(
        "bench-contention.png",
        "Processes incrementing one store: commits per second",
        "processes (one connection each)",
        "commits per second, all processes (median of rounds)",
        xticks_at_data=True,
    ),
    "takers": Figure(
        "bench-takers.png",
        "Takers waiting on one queue: resumes per item",
        "takers waiting on the queue (executions)",
        "per item delivered (runs, or wake intents)",
        xscale="symlog",
        xticks_at_data=True,
    ),
}


def series_of(rows: Iterable[Row]) -> list[Series]:
    """The series attached to ``rows``, in order."""
    return [series for row in rows for series in row.series]


def write_plots(
    series: Iterable[Series], out_dir: Path | str = DEFAULT_DIR, *, caption: str = ""
) -> list[Path]:
    """Draw one PNG per figure of :data:`FIGURES` that ``series`` has data for, into
    ``out_dir`` (created if needed); return the paths written. ``caption`` is printed in
    small type under each figure (the command and the machine, say). A series with no data
    (``x`` empty) is a legend entry only: a baseline that could not be measured, with
    the reason in its label."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure
    from matplotlib.ticker import FuncFormatter, NullFormatter, NullLocator

    by_figure: dict[str, list[Series]] = {}
    for item in series:
        if item.figure not in FIGURES:
            raise ValueError(f"unknown figure {item.figure!r}; known: {sorted(FIGURES)}")
        by_figure.setdefault(item.figure, []).append(item)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for key, spec in FIGURES.items():
        items = by_figure.get(key)
        if not items or not any(item.x for item in items):
            continue
        fig = MplFigure(figsize=CDF_SIZE if spec.cdf else SIZE, dpi=DPI)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        xs: set[float] = set()
        for item in items:
            _draw(ax, item, spec)
            xs.update(item.x)
        if spec.xscale == "symlog":
            positive = [x for x in xs if x > 0]
            ax.set_xscale("symlog", linthresh=min(positive) if positive else 1.0)
        elif spec.xscale != "linear":
            ax.set_xscale(spec.xscale)
        if spec.xticks_at_data:
            ax.xaxis.set_minor_locator(NullLocator())
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xticks(sorted(xs))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:,.0f}"))
        elif spec.xscale == "log" and xs:
            low, high = min(xs), max(xs)
            ticks = [
                m * 10**e
                for e in range(-3, 6)
                for m in (1, 2, 5)
                if low / 1.5 <= m * 10**e <= high * 1.5
            ]
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xticks(ticks or [low, high])
            ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:g}"))
        if spec.cdf:
            ax.set_ylim(0, 1.02)
        elif spec.ymin_zero:
            ax.set_ylim(bottom=0)
        ax.set_title(spec.title, fontsize=11)
        ax.set_xlabel(spec.xlabel)
        ax.set_ylabel(spec.ylabel)
        ax.grid(True, which="major", alpha=0.3)
        if spec.cdf:  # the curves cross the whole frame: the legend goes under it
            ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.11), ncol=1)
        else:
            ax.legend(fontsize=8, loc="best")
        if caption:
            fig.text(0.01, 0.01, caption, fontsize=7, color="0.4")
            fig.tight_layout(rect=(0, 0.03, 1, 1))
        else:
            fig.tight_layout()
        path = out / spec.filename
        fig.savefig(path, format="png", dpi=DPI)
        written.append(path)
    return written


def _draw(ax: Any, item: Series, spec: Figure) -> None:
    if not item.x:  # not measured: a legend entry saying so
        ax.plot([], [], linestyle="none", marker="x", color="0.5", label=item.label)
        return
    if spec.cdf:
        ordered = sorted(item.x)
        n = len(ordered)
        fractions = [(i + 1) / n for i in range(n)]
        label = f"{item.label} (n={n}, p50 {statistics.median(ordered):.1f} {spec.unit})"
        ax.step(ordered, fractions, where="post", label=label)
        return
    if len(item.x) != len(item.y):
        raise ValueError(f"series {item.label!r}: {len(item.x)} x values, {len(item.y)} y")
    points = sorted(zip(item.x, item.y, strict=True))
    ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=item.label)
