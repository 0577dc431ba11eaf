"""Benchmarks. Run all with ``python -m bench`` (``--quick`` for a short run, ``--only NAME``).

Every suite is a module here with ``run(quick: bool) -> list[Row]``; every figure is reported
as a ratio against a baseline measured in the same process and run. ``--plot`` then draws
the figures of the performance page from the raw series the rows carry (``bench.plot``).
"""
