"""``python -m bench [--quick] [--only SUITE ...] [--markdown]``: run benchmark suites."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

from .table import Row, format_markdown, format_table

#: Suites in run order; a suite whose module does not exist yet is listed as missing.
SUITES = ["core", "connector", "runtime"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer iterations (smoke run)")
    parser.add_argument("--only", nargs="*", choices=SUITES, help="run only these suites")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table too")
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
