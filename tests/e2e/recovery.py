"""Measuring recovery: SIGKILL the worker running a step, time until the execution is done.

``measure_recovery`` is the harness (the e2e test and the fault suite reuse it): each
round starts ``e2e.slow_step`` (its first attempt hangs), SIGKILLs the worker whose pool
process runs it while another worker is alive, and records the seconds from the kill to
the execution's completion; then starts a replacement worker. Needs an ``Env`` with a
relay running.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from yieldstar_django.runtime import get_execution, start_workflow

from .conftest import Env, Process, wait_until


@dataclass(frozen=True)
class Recovery:
    """Seconds from each SIGKILL to the execution's completion."""

    seconds: list[float]

    def quantile(self, q: float) -> float:
        ordered = sorted(self.seconds)
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

    @property
    def p50(self) -> float:
        return statistics.median(self.seconds)

    @property
    def p95(self) -> float:
        return self.quantile(0.95)

    def summary(self) -> str:
        return (
            f"{len(self.seconds)} kills: p50 {self.p50:.2f}s p95 {self.p95:.2f}s "
            f"max {max(self.seconds):.2f}s"
        )


def _holder(workers: list[Process], pid: int) -> Process:
    """The worker whose process group holds ``pid`` (its pool process)."""
    group = os.getpgid(pid)
    for worker in workers:
        if worker.popen.pid == group:
            return worker
    raise AssertionError(f"no worker holds process {pid}")


def measure_recovery(
    env: Env, workdir: Path, kills: int = 20, timeout: float = 60, holds: tuple[float, ...] = (0,)
) -> Recovery:
    """Kill the worker running a step ``kills`` times; return the recovery times.

    Round ``i`` kills ``holds[i % len(holds)]`` seconds after the step started (a hold
    longer than ``LEASE_SECONDS`` kills a worker that has renewed its lease)."""
    workers = [env.start_worker(f"w{i}") for i in range(2)]
    seconds: list[float] = []
    for round_ in range(kills):
        marker = workdir / f"kill-{round_}"
        marker.mkdir()
        attempts = marker / "attempts"
        eid = start_workflow("e2e.slow_step", str(marker))
        wait_until("the step to start", lambda a=attempts: a.exists() and a.read_text() != "")
        doomed = _holder(workers, int(attempts.read_text().split()[0]))
        time.sleep(holds[round_ % len(holds)])
        doomed.kill()
        killed_at = time.monotonic()
        workers.remove(doomed)
        wait_until("the execution to complete", lambda e=eid: get_execution(e).is_finished, timeout)
        seconds.append(time.monotonic() - killed_at)
        assert get_execution(eid).status == "completed"
        workers.append(env.start_worker(f"w{round_ + 2}"))
    for worker in workers:
        worker.stop()
    return Recovery(seconds)
