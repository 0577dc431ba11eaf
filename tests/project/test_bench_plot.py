"""``bench.plot`` draws the performance page's figures from synthetic series (no benchmark
runs here)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from bench.plot import FIGURES, series_of, write_plots
from bench.table import Row, Series

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _synthetic() -> list[Series]:
    ours = [8.0 + (i % 13) * 0.7 for i in range(60)]
    return [
        Series("wake-latency", "yieldstar: store commit -> woken take recorded", ours),
        Series("wake-latency", "Celery: send_task -> task starts", [x / 2 for x in ours]),
        Series("wake-latency", "DBOS send -> recv: not measured (ImportError)", []),
        Series("commit-cost", "wakes none", [0, 1_000, 100_000], [0.9, 0.92, 0.95]),
        Series("commit-cost", "wakes 1", [0, 1_000, 100_000], [0.9, 1.3, 1.35]),
        Series("contention", "increments", [1, 2, 4, 8], [1050, 1100, 1080, 1040]),
        Series("takers", "resumes per item", [1, 5, 10], [1.0, 3.0, 5.5]),
    ]


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_writes_one_valid_png_per_figure(tmp_path: Path) -> None:
    row = Row("runtime", "synthetic", 1.0, "baseline", 1.0, "ms", series=_synthetic())

    written = write_plots(series_of([row]), tmp_path, caption="python -m bench --plot")

    assert sorted(p.name for p in written) == sorted(f.filename for f in FIGURES.values())
    for path in written:
        assert path.parent == tmp_path
        assert path.stat().st_size > 10_000, path  # axes, labels, lines: not an empty canvas
        cdf = next(f for f in FIGURES.values() if f.filename == path.name).cdf
        assert _png_size(path) == ((800, 650) if cdf else (800, 500))


def test_plots_only_the_figures_measured(tmp_path: Path) -> None:
    """``--plot --only connector`` redraws the connector's figures, nothing else."""
    measured = [s for s in _synthetic() if s.figure in ("commit-cost", "contention")]
    measured.append(Series("wake-latency", "DBOS: not measured", []))  # no data: no file

    written = write_plots(measured, tmp_path / "img")

    assert {p.name for p in written} == {"bench-commit-cost.png", "bench-contention.png"}
    assert sorted(p.name for p in (tmp_path / "img").iterdir()) == sorted(p.name for p in written)


def test_rejects_an_unknown_figure_and_mismatched_points(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown figure"):
        write_plots([Series("nope", "x", [1.0])], tmp_path)
    with pytest.raises(ValueError, match="2 x values, 1 y"):
        write_plots([Series("takers", "x", [1.0, 2.0], [1.0])], tmp_path)
