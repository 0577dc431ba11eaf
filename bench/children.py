"""Child workflows: a parent fans out and gathers ``n`` children, against DBOS.

Ours: ``bench.fan_out`` started with ``start_workflow``; one ``step.start_many`` starts
``n`` children of ``bench.child`` (one ``step.run`` each) and one ``step.gather`` waits for
them, all run by a Celery worker subprocess (``-c BENCH_WORKER_CONCURRENCY``). DBOS: a
``@DBOS.workflow`` that starts ``n`` child workflows (one ``@DBOS.step`` each) with
``DBOS.start_workflow`` and waits on each handle's ``get_result()``, in this process, on its
own system database of the same PostgreSQL server. The figure is children per second,
from the parent's start to its result, the median of interleaved rounds. Target: >= 3x.

Environment: as the runtime suite (``BENCH_DATABASE_URL``, ``BENCH_BROKER_URL``).
"""

from __future__ import annotations

import os
import statistics
import time

from .databases import configure_dbos, start_dbos
from .runtime import DEFAULT_BROKER, WORKER_CONCURRENCY, Worker, _setup_django, _wait, _yieldstar
from .table import Row

SUITE = "children"


def fan_out(n: int) -> tuple[float, int]:
    """Children per second of one ``bench.fan_out`` of ``n`` run by the worker, and how
    many runs the parent took."""
    from yieldstar_django.runtime import get_execution, start_workflow

    start = time.perf_counter()
    execution_id = start_workflow("bench.fan_out", n)
    _wait(
        "the parent to gather its children",
        lambda: get_execution(execution_id).is_finished,
        timeout=900,
    )
    elapsed = time.perf_counter() - start
    execution = get_execution(execution_id)
    assert execution.result == sum(range(n)), execution.error
    return n / elapsed, execution.runs


class DbosFanOut:
    """The same shape in DBOS: a workflow that starts ``n`` workflows and gets their
    results."""

    def __init__(self) -> None:
        DBOS = configure_dbos("yieldstar-bench-children")
        self.DBOS = DBOS

        @DBOS.step()
        def child_step(i: int) -> int:
            return i

        @DBOS.workflow()
        def child(i: int) -> int:
            return int(child_step(i))

        @DBOS.workflow()
        def parent(n: int) -> int:
            handles = [DBOS.start_workflow(child, i) for i in range(n)]
            return sum(handle.get_result() for handle in handles)

        self.parent = parent
        DBOS.launch()

    def fan_out(self, n: int) -> float:
        start = time.perf_counter()
        assert self.DBOS.start_workflow(self.parent, n).get_result() == sum(range(n))
        return n / (time.perf_counter() - start)

    def close(self) -> None:
        self.DBOS.destroy()


def run(quick: bool = False) -> list[Row]:
    _setup_django()
    rounds = 2 if quick else 3
    n = 200 if quick else 1000
    broker = os.environ.get("BENCH_BROKER_URL", DEFAULT_BROKER)
    ours: list[float] = []
    parent_runs: list[int] = []
    theirs: list[float] = []
    with _yieldstar():
        worker = Worker(broker)
        try:
            fan_out(20)  # warm up
            dbos, unavailable = start_dbos(DbosFanOut)
            try:
                if dbos is not None:
                    dbos.fan_out(20)
                for _ in range(rounds):
                    rate, runs = fan_out(n)
                    ours.append(rate)
                    parent_runs.append(runs)
                    if dbos is not None:
                        theirs.append(dbos.fan_out(n))
            finally:
                if dbos is not None:
                    dbos.close()
        finally:
            worker.stop()
    note = (
        f"a parent starts {n} children (one step each) in one step and gathers them; "
        f"ours on the Celery worker (-c {WORKER_CONCURRENCY}), the parent ran "
        f"{max(parent_runs)} times; median of {rounds} rounds"
    )
    if not theirs:
        return [
            Row(SUITE, f"children/s, fan-out and gather of {n}", statistics.median(ours),
                unavailable, 0, "children/s", note=note)
        ]  # fmt: skip
    return [
        Row(
            SUITE,
            f"children/s, fan-out and gather of {n}",
            statistics.median(ours),
            "DBOS start_workflow + get_result, same shape",
            statistics.median(theirs),
            "children/s",
            target=">= 3x",
            note=note,
        )
    ]
