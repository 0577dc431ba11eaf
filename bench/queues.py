"""Queues: executions started through a queue against plain starts and against DBOS.

- **throughput through a queue**: 1,000 short executions (one ``step.run`` each; 300 with
  ``--quick``) started at once into a queue of concurrency 50 and run by the Celery
  worker (``bench.runtime.Worker``), from the first start to the last completion, against
  the same executions started with ``start_workflow`` (target: at least 0.8x), and against
  DBOS: the same workflows enqueued on a DBOS ``Queue`` of concurrency 50 on the same
  PostgreSQL (target: at least 3x).
- **debounce**: 1,000 starts of one key inside the debounce window collapse into one
  execution, which runs once with the last arguments (checked, not timed: the row's
  figure is the starts per second).

Environment: as ``bench.runtime`` (``BENCH_DATABASE_URL``, ``BENCH_BROKER_URL``).
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

from .databases import configure_dbos, start_dbos
from .runtime import DEFAULT_BROKER, WORKER_CONCURRENCY, Worker, _setup_django, _wait, _yieldstar
from .table import Row

SUITE = "queues"


def _throughput(start: Any, n: int) -> float:
    """Executions per second: ``n`` started by ``start(i)``, until all completed."""
    from yieldstar_django.models import Execution

    began = time.perf_counter()
    ids = [start(i) for i in range(n)]
    _wait(
        "executions to complete",
        lambda: Execution.objects.filter(pk__in=ids, status="completed").count() == n,
    )
    return n / (time.perf_counter() - began)


def plain(n: int) -> float:
    from yieldstar_django.runtime import start_workflow

    return _throughput(lambda i: start_workflow("bench.short", i), n)


def queued(n: int) -> float:
    from .workflows import short_queue

    return _throughput(lambda i: short_queue.start("bench.short", i), n)


class DbosQueue:
    """DBOS with a ``Queue`` of concurrency 50, in this process (``bench.runtime.Dbos``'s
    system database)."""

    def __init__(self) -> None:
        DBOS = configure_dbos("yieldstar-bench-queues")

        @DBOS.step()
        def noop(i: int) -> int:
            return i

        @DBOS.workflow()
        def short(i: int) -> int:
            return int(noop(i))

        self.DBOS, self.short = DBOS, short
        DBOS.launch()
        # Its defaults but the concurrency (it polls the queue every second).
        self.queue = DBOS.register_queue("bench_short", concurrency=50)

    def throughput(self, n: int) -> float:
        began = time.perf_counter()
        handles = [self.queue.enqueue(self.short, i) for i in range(n)]
        for handle in handles:
            handle.get_result()
        return n / (time.perf_counter() - began)

    def close(self) -> None:
        self.DBOS.destroy()


def debounce(n: int) -> tuple[float, list[str], Any]:
    """``n`` starts of one key in the window: starts per second, the ids returned, and the
    one execution's result once it ran (its timer delivered by the relay, in-process)."""
    from yieldstar_django.runtime import get_execution
    from yieldstar_django.wakes import relay_once

    from .workflows import debounce_queue

    key = f"burst-{time.time_ns()}"
    began = time.perf_counter()
    ids = [debounce_queue.start("bench.short", i, key=key, debounce=2.0) for i in range(n)]
    rate = n / (time.perf_counter() - began)

    def done() -> bool:
        relay_once()
        return get_execution(ids[-1]).status == "completed"

    _wait("the debounced execution to complete", done)
    return rate, sorted(set(ids)), get_execution(ids[-1]).result


def run(quick: bool = False) -> list[Row]:
    """Rounds interleave ours, plain starts and DBOS; each figure is the median."""
    _setup_django()
    n = 300 if quick else 1000
    rounds = 2 if quick else 3
    broker = os.environ.get("BENCH_BROKER_URL", DEFAULT_BROKER)
    ours: list[float] = []
    baseline: list[float] = []
    dbos_rates: list[float] = []
    with _yieldstar():
        worker = Worker(broker)
        try:
            plain(50)  # warm up every path
            queued(50)
            dbos, unavailable = start_dbos(DbosQueue)
            try:
                for _ in range(rounds):
                    ours.append(queued(n))
                    baseline.append(plain(n))
                    if dbos is not None:
                        dbos_rates.append(dbos.throughput(n))
            finally:
                if dbos is not None:
                    dbos.close()
            rate, ids, result = debounce(n)
        finally:
            worker.stop()
    assert len(ids) == 1 and result == n - 1, (ids, result)
    shape = f"{n} one-step executions, concurrency 50, worker -c {WORKER_CONCURRENCY}"
    rows = [
        Row(SUITE, "executions/s through a queue", statistics.median(ours),
            "plain starts", statistics.median(baseline), "exec/s", target=">= 0.8x",
            note=f"{shape}; {rounds} rounds"),
    ]  # fmt: skip
    if dbos is not None:
        rows.append(
            Row(SUITE, "executions/s through a queue", statistics.median(ours),
                "DBOS Queue(concurrency=50)", statistics.median(dbos_rates), "exec/s",
                target=">= 3x",
                note=f"{shape}; DBOS in-process, same PostgreSQL, its default polling (1 s)")
        )  # fmt: skip
    else:
        rows.append(Row(SUITE, "executions/s through a queue", statistics.median(ours),
                        unavailable, 0, "exec/s"))  # fmt: skip
    rows.append(
        Row(SUITE, f"debounce: {n} starts of one key", rate, "starts/s", 1.0, "starts/s",
            note=f"1 execution, ran once with the last arguments ({result})")
    )  # fmt: skip
    return rows
