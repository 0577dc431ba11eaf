"""Atomic steps: ``step.atomic`` writing one row of a project's table against ``step.run``
writing the same row.

Both run ``n`` steps in one execution, in this process (``run_execution``, wakes dropped),
each step's function creating one ``Entry`` row (``tests.shared.models``) through the ORM.
``step.run`` commits the row on its own (autocommit) and then the step's heap row: two
commits, at least once. ``step.atomic`` commits the row and the heap row in one
transaction: exactly once. The figure is the time per step, the median of interleaved
rounds (``run``, then ``atomic``, each round), against ``step.run``'s. Target: at most
1.2x.

Database: ``BENCH_DATABASE_URL`` (default ``postgres://postgres@127.0.0.1:5432/
yieldstar_bench``, created and migrated if needed), settings ``bench.worker_settings``.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from .connector import setup_django
from .table import Row

SUITE = "atomic"


def drop_wakes(wakes: Any) -> None:
    """The ``WAKE_BACKEND`` of the benchmark: no worker runs these executions."""


def seconds_per_step(workflow: str, n: int) -> float:
    """Seconds per step of one execution of ``workflow`` with ``n`` steps, run here."""
    from yieldstar_django.runtime import get_execution, start_workflow
    from yieldstar_django.runtime.executions import run_execution

    execution_id = start_workflow(workflow, n)
    start = time.perf_counter()
    run_execution(execution_id)
    elapsed = time.perf_counter() - start
    assert get_execution(execution_id).result == n
    return elapsed / n


def run(quick: bool = False) -> list[Row]:
    setup_django()
    from django.conf import settings
    from django.core.management import call_command
    from django.test.utils import override_settings

    import bench.workflows  # noqa: F401  (registers the workflows)

    call_command("migrate", verbosity=0)
    rounds = 3 if quick else 5
    n = 200 if quick else 500
    yieldstar = {**getattr(settings, "YIELDSTAR", {}), "WAKE_BACKEND": f"{__name__}.drop_wakes"}
    runs: list[float] = []
    atomics: list[float] = []
    with override_settings(YIELDSTAR=yieldstar):
        seconds_per_step("bench.run_rows", 20)  # warm up both paths
        seconds_per_step("bench.atomic_rows", 20)
        for _ in range(rounds):
            runs.append(seconds_per_step("bench.run_rows", n))
            atomics.append(seconds_per_step("bench.atomic_rows", n))
    return [
        Row(
            SUITE,
            "step.atomic writing one row",
            statistics.median(atomics) * 1e3,
            "step.run writing the same row",
            statistics.median(runs) * 1e3,
            "ms/step",
            target="<= 1.2x",
            note=f"{n} steps in one execution, in-process; median of {rounds} interleaved "
            "rounds; the row and the heap row in one commit (atomic) or two (run)",
        )
    ]
