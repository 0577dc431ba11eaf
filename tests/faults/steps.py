"""Reading what the processes noted of the ``faults.grind`` steps they started
(``workflows.steps_file``): which pool process runs which execution, and when an
execution's step ran again after a fault."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.e2e.conftest import Process


@dataclass(frozen=True)
class StepStart:
    execution: str
    index: int
    pid: int
    at: float


def step_starts(history: Path) -> list[StepStart]:
    """Every step start noted so far, oldest first (a line being written is skipped)."""
    found = []
    for path in history.glob("steps-*.log"):
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            found.append(StepStart(row["execution"], row["index"], row["pid"], row["at"]))
    return sorted(found, key=lambda s: s.at)


def pool_processes(worker: Process) -> list[int]:
    """The pids of a prefork worker's pool processes (its children)."""
    done = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(worker.popen.pid)], capture_output=True, text=True
    )
    return [int(pid) for pid in done.stdout.split()]


def running(history: Path, pids: set[int], now: float, within: float) -> dict[int, str]:
    """Among ``pids``, those that started a step less than ``within`` seconds before
    ``now`` (so, with steps longer than that, are in it): the execution of each."""
    latest: dict[int, StepStart] = {}
    for start in step_starts(history):
        if start.pid in pids:
            latest[start.pid] = start
    return {pid: s.execution for pid, s in latest.items() if now - s.at < within}


def resumed_after(history: Path, execution: str, moment: float, *, not_by: set[int]) -> float:
    """When a step of ``execution`` next started after ``moment`` in a process not in
    ``not_by``; ``inf`` if none did."""
    times = [
        s.at
        for s in step_starts(history)
        if s.execution == execution and s.at > moment and s.pid not in not_by
    ]
    return min(times, default=float("inf"))
