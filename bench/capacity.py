"""Capacity: what one PostgreSQL sustains with 1, 2 and 4 worker processes.

``python -m bench --only capacity``. For each pool size, a Celery worker (prefork, that
many pool processes) runs ``BENCH_CAPACITY_EXECUTIONS`` short executions (``bench.steps``:
``BENCH_CAPACITY_STEPS`` durable ``run`` steps each, 3 by default), started one commit
each by ``BENCH_CAPACITY_PRODUCERS`` threads of this process (4) while the worker runs
them. Reported per pool size:

- executions/s and steps/s: the executions over the time from the first start to the
  last completion (the baseline is the 1-process figure: the ratio is the scaling);
- wake p50 and p99: from a store commit to the woken take recorded
  (``runtime.wake_latencies``, ``BENCH_CAPACITY_WAKES`` wakes after the run);
- connections used: the most client connections to the database that
  ``pg_stat_activity`` showed during the run (sampled every 0.1 s; this process's own
  ones included), against the budget of docs/operations/capacity.md (two per pool
  process: its own and its lease keeper's, plus the producers').

``--quick`` runs 300 executions per pool size.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .runtime import (
    DEFAULT_BROKER,
    Worker,
    _quantile,
    _setup_django,
    _wait,
    _yieldstar,
    wake_latencies as _wake_latencies,
)
from .table import Row

COUNT = int(os.environ.get("BENCH_CAPACITY_EXECUTIONS", "100000"))
STEPS = int(os.environ.get("BENCH_CAPACITY_STEPS", "3"))
WAKES = int(os.environ.get("BENCH_CAPACITY_WAKES", "200"))
POOLS = (1, 2, 4)
#: Threads of this process starting the executions (one would bound the rate by its own
#: round trips).
PRODUCERS = int(os.environ.get("BENCH_CAPACITY_PRODUCERS", "4"))


class ConnectionSampler:
    """The most client connections to this database seen in ``pg_stat_activity``."""

    def __init__(self) -> None:
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from tests.connections import second_connection

        conn = second_connection()
        try:
            while not self._stop.wait(0.1):
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
                ).fetchone()
                self.most = max(self.most, int(row[0]) if row else 0)
        finally:
            conn.close()

    def __enter__(self) -> ConnectionSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(10)


def _start(count: int, steps: int) -> list[str]:
    """Start ``count`` executions of ``bench.steps``, one commit each, on a connection of
    this thread's (closed at the end)."""
    from django.db import connections

    from yieldstar_django.runtime import start_workflow

    try:
        return [start_workflow("bench.steps", steps) for _ in range(count)]
    finally:
        connections.close_all()


def throughput(count: int, steps: int) -> float:
    """Seconds from the first of ``count`` starts (by ``PRODUCERS`` threads) to the last
    completion."""
    from yieldstar_django.models import Execution

    started = time.perf_counter()
    shares = [count // PRODUCERS + (1 if n < count % PRODUCERS else 0) for n in range(PRODUCERS)]
    with ThreadPoolExecutor(PRODUCERS) as pool:
        ids = [i for started_ids in pool.map(_start, shares, [steps] * PRODUCERS)
               for i in started_ids]  # fmt: skip
    _wait(
        "executions to complete",
        lambda: Execution.objects.filter(pk__in=ids, status="completed").count() == count,
        timeout=max(300.0, count / 20),
    )
    return time.perf_counter() - started


def run(quick: bool = False) -> list[Row]:
    _setup_django()
    count = 300 if quick else COUNT
    wakes = 40 if quick else WAKES
    broker = os.environ.get("BENCH_BROKER_URL", DEFAULT_BROKER)
    measured: dict[int, tuple[float, float, float, int]] = {}
    for processes in POOLS:
        with _yieldstar():
            worker = Worker(broker, concurrency=processes)
            try:
                throughput(20, STEPS)  # warm up every pool process
                with ConnectionSampler() as sampler:
                    seconds = throughput(count, STEPS)
                from_commit, _ = _wake_latencies(wakes, 0.01)
                measured[processes] = (
                    count / seconds,
                    _quantile(from_commit, 0.5) * 1000,
                    _quantile(from_commit, 0.99) * 1000,
                    sampler.most,
                )
            finally:
                worker.stop()
    one = measured[POOLS[0]]
    rows: list[Row] = []
    for processes, (rate, p50, p99, connections) in measured.items():
        what = f"{processes} process{'es' if processes > 1 else ''}"
        note = f"{count} executions x {STEPS} steps"
        rows += [
            Row("capacity", f"executions/s, {what}", rate, "1 process", one[0], "/s", "", note),
            Row("capacity", f"steps/s, {what}", rate * STEPS, "1 process", one[0] * STEPS, "/s",
                "", note),
            Row("capacity", f"wake p50, {what}", p50, "1 process", one[1], "ms", "",
                f"{wakes} wakes after the run"),
            Row("capacity", f"wake p99, {what}", p99, "1 process", one[2], "ms", "",
                f"{wakes} wakes after the run"),
            Row("capacity", f"connections used, {what}", connections,
                f"budget 2 x processes + {PRODUCERS}", 2 * processes + PRODUCERS, "", "",
                f"most seen in pg_stat_activity during the run, {PRODUCERS} producers"),
        ]  # fmt: skip
    return rows
