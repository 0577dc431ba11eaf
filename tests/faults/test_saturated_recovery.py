"""Recovery while every pool process is busy, on Redis and on RabbitMQ.

- **SIGKILLs under saturation**: two workers of two pool processes run 12 long
  executions (``faults.grind``: steps of 1 s), so three times as many runs wait in the
  queue as there are processes. A pool process in the middle of a step is SIGKILLed every
  few seconds; the recovery of a kill is the time until that execution's step starts
  again in another process. Its lease (4 s) must expire first; then its takeover is sent
  before the queued wakes, and a process frees within a time slice (``RUN_SLICE_SECONDS``,
  2 s), since no resume holds its process for a whole run. Target: p95 at most 10 s.
- **A stopped consumer**: a worker is SIGSTOPped (its whole process group) while it runs
  executions and has a free pool process (the broker may push it a takeover it will not
  run). Each execution it was running must start a step in another worker at most the
  lease plus 1 s after the stop; SIGCONT then finds its runs fenced.

The figures are printed with the suite's others; ``YIELDSTAR_FAULTS_SATURATED_KILLS`` and
``YIELDSTAR_FAULTS_STOPS`` (per broker) make longer statistical runs.
"""

from __future__ import annotations

import os
import random
import signal
import time
import uuid
from functools import partial

import pytest

from tests.e2e.conftest import Process
from tests.polling import wait_until

from .conftest import FAULT_MARKS, Broker, Faults
from .figures import percentile
from .steps import pool_processes, resumed_after, running

pytestmark = FAULT_MARKS

KILLS = int(os.environ.get("YIELDSTAR_FAULTS_SATURATED_KILLS", "4"))
STOPS = int(os.environ.get("YIELDSTAR_FAULTS_STOPS", "2"))
#: Seconds of one step of the saturating executions.
STEP = 1.0
#: The recovery target with every process busy (p95, seconds) and the stopped consumer's
#: (each takeover: the lease plus this).
SATURATED_P95 = 10.0
STOP_MARGIN = 1.0


@pytest.fixture
def broker(cut_broker: Broker) -> Broker:
    """The worlds of this module run on Redis, then on RabbitMQ."""
    return cut_broker


def test_sigkills_with_every_pool_process_busy(faults: Faults) -> None:
    workers = faults.start_workers(count=2, concurrency=2)
    faults.start_relay()
    executions = 12
    steps = 6 + 3 * KILLS
    tally_id = f"t-{uuid.uuid4().hex[:8]}"
    faults.start("faults.grind", [[tally_id, steps, STEP] for _ in range(executions)])
    victims: list[tuple[int, str, float]] = []  # (pid, execution, killed at)
    time.sleep(3.0)  # every process takes a run; the rest queue
    for _ in range(KILLS):
        busy = find_busy(faults, workers)
        unfinished = executions - faults.count("completed")
        assert unfinished > 4, f"only {unfinished} executions left: the workers are not saturated"
        pid, execution = random.choice(sorted(busy.items()))
        os.kill(pid, signal.SIGKILL)
        victims.append((pid, execution, time.time()))
        time.sleep(5.0)
    assert faults.count("completed") < executions, "the runs ended before the kills did"
    try:
        anomalies = faults.verify(timeout=150)
    finally:
        faults.recoveries += [
            resumed_after(faults.history, execution, killed, not_by={pid}) - killed
            for pid, execution, killed in victims
        ]
    assert anomalies == []
    assert percentile(faults.recoveries, 0.95) <= SATURATED_P95, faults.recoveries


def test_a_stopped_consumer_holds_no_takeover(faults: Faults) -> None:
    """Three workers, four executions: a stopped worker has a free pool process, so the
    broker may hand it messages it will not run until SIGCONT."""
    workers = faults.start_workers(count=3, concurrency=2)
    faults.start_relay()
    tally_id = f"t-{uuid.uuid4().hex[:8]}"
    faults.start("faults.grind", [[tally_id, 30 * STOPS, 0.5] for _ in range(4)])
    time.sleep(3.0)
    for _ in range(STOPS):
        victim, held = find_holder(faults, workers)
        stopped_pids = victim.pids()
        victim.signal(signal.SIGSTOP)
        stopped = time.time()
        try:
            wait_until(
                "another worker to take over the stopped worker's executions",
                partial(taken_over, faults, list(held.values()), stopped, stopped_pids),
                60,
            )
            faults.recoveries += [
                resumed_after(faults.history, e, stopped, not_by=stopped_pids) - stopped
                for e in held.values()
            ]
            time.sleep(max(0.0, stopped + 2 * faults.lease_seconds - time.time()))
        finally:
            victim.signal(signal.SIGCONT)
        time.sleep(2.0)
    anomalies = faults.verify(timeout=150)
    assert anomalies == []
    assert max(faults.recoveries) <= faults.lease_seconds + STOP_MARGIN, faults.recoveries


def find_busy(faults: Faults, workers: list[Process]) -> dict[int, str]:
    """Pool processes in the middle of a step: the execution of each."""
    busy: dict[int, str] = {}

    def found() -> bool:
        pids = {pid for w in workers for pid in pool_processes(w)}
        busy.update(running(faults.history, pids, time.time(), within=0.6 * STEP))
        return bool(busy)

    wait_until("a pool process in the middle of a step", found, 30, interval=0.1)
    return busy


def find_holder(faults: Faults, workers: list[Process]) -> tuple[Process, dict[int, str]]:
    """A worker with a pool process in the middle of a step, and what its processes run."""
    chosen: list[tuple[Process, dict[int, str]]] = []

    def found() -> bool:
        for worker in random.sample(workers, len(workers)):
            held = running(faults.history, set(pool_processes(worker)), time.time(), 0.4)
            if held:
                chosen.append((worker, held))
                return True
        return False

    wait_until("a worker in the middle of a step", found, 30, interval=0.1)
    return chosen[-1]


def taken_over(faults: Faults, executions: list[str], stopped: float, pids: set[int]) -> bool:
    """Whether each of ``executions`` started a step after ``stopped`` outside ``pids``."""
    return all(
        resumed_after(faults.history, e, stopped, not_by=pids) < float("inf") for e in executions
    )
