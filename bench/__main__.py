"""``python -m bench [--quick] [--only SUITE ...] [--markdown] [--plot]``: run benchmark suites."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from datetime import date

from .table import Row, format_markdown, format_table

#: Suites in run order; a suite whose module does not exist yet is listed as missing.
SUITES = [
    "core",
    "connector",
    "runtime",
    "bounds",
    "atomic",
    "capacity",
    "queues",
    "observability",
    "children",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer iterations (smoke run)")
    parser.add_argument("--only", nargs="*", choices=SUITES, help="run only these suites")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table too")
    parser.add_argument(
        "--plot",
        action="store_true",
        help="then draw the figures of what was measured as PNGs in docs/img (matplotlib)",
    )
    args = parser.parse_args(argv)
    rows: list[Row] = []
    for suite in args.only or SUITES:
        if importlib.util.find_spec(f"bench.{suite}") is None:
            print(f"[bench] suite {suite!r} is not written yet", file=sys.stderr)
            continue
        module = importlib.import_module(f"bench.{suite}")
        print(f"[bench] running {suite} ...", file=sys.stderr, flush=True)
        suite_rows = module.run(quick=args.quick)
        print(format_table(suite_rows), flush=True)
        print(flush=True)
        rows.extend(suite_rows)
    if args.markdown:
        print(format_markdown(rows))
    if args.plot:
        from .plot import series_of, write_plots

        command = "python -m bench" + (" --quick" if args.quick else "")
        if args.only:
            command += " --only " + " ".join(args.only)
        caption = f"{command} --plot; {date.today()}, {os.cpu_count()} cores"
        written = write_plots(series_of(rows), caption=caption)
        for path in written:
            print(f"[bench] wrote {path}", flush=True)
        if not written:
            print("[bench] nothing to plot in the suites run", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
