"""Takers of one cohort whose woken member is cancelled before it runs, under worker kills.

40 executions wait to take one item each from one queue: one selector, so one cohort, and
a commit wakes only the first of them. Eight times, with every worker stopped (SIGSTOP),
an item is pushed (its commit wakes the cohort's first taker, whose wake waits in the
broker) and that taker is cancelled before any worker can run it: its waiter's removal
must hand the wake to the next taker of the cohort, or the item stays with every other
taker asleep. The workers go on, a pool process is SIGKILLed each round, and the rest of
the items arrive one at a time. Every taker not cancelled must finish with one item, each
item taken once (the checker: linearizable store history, no item lost, doubled or
invented), and no wake intent left overdue."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time

from tests.e2e.conftest import wait_until

from .conftest import FAULT_MARKS, Faults
from .workload import fill_queue, start_drain

pytestmark = FAULT_MARKS

TAKERS = 40
ROUNDS = 8


def woken_takers(faults: Faults) -> list[str]:
    """The executions of the test with a waiter a commit has woken, not yet run again."""
    with faults.cluster.connect() as conn:
        rows = conn.execute(
            "SELECT DISTINCT w.execution_id FROM yieldstar_waiter w "
            "JOIN yieldstar_execution e ON e.id = w.execution_id "
            "WHERE w.execution_id = ANY(%s) AND w.woken_at IS NOT NULL "
            "AND e.status = 'waiting'",
            [faults.executions],
        ).fetchall()
    return [row[0] for row in rows]


def test_a_cancelled_woken_taker_hands_its_wake_to_the_next(faults: Faults) -> None:
    workers = faults.start_workers()
    faults.start_relay()
    queue_id = fill_queue(faults, 0)
    start_drain(faults, queue_id, executions=TAKERS, each=1)
    cancelled: list[str] = []
    for n in range(ROUNDS):
        # Each round takes one item and cancels one taker. The taker that took the last
        # item woke the next of the cohort, which looks again: once it waits again, a push
        # wakes one taker; before, the push wakes none (the cohort's woken one will look).
        wait_until(
            f"the cohort to wait before round {n}",
            lambda n=n: faults.waiting_to_be_woken() == TAKERS - 2 * n,
            60,
        )
        for worker in workers:
            os.killpg(worker.popen.pid, signal.SIGSTOP)
        try:
            faults.driver("push", queue_id, f"{queue_id}-r{n}", "1")
            woken = woken_takers(faults)
            assert len(woken) == 1, f"one taker of the cohort woken, not {woken}"
            faults.driver("cancel", *woken)
            cancelled += woken
        finally:
            for worker in workers:
                os.killpg(worker.popen.pid, signal.SIGCONT)
        wait_until(
            f"round {n}'s item to be taken",
            lambda n=n: faults.count("completed") == n + 1,
            60,
        )
        pool = subprocess.run(
            ["ps", "-o", "pid=", "--ppid", str(random.choice(workers).popen.pid)],
            capture_output=True,
            text=True,
        ).stdout.split()
        if pool:
            subprocess.run(["kill", "-KILL", random.choice(pool)], check=False)
        time.sleep(0.3)
    faults.driver("push", queue_id, queue_id, str(TAKERS - 2 * ROUNDS), "0.1")
    anomalies = faults.verify(timeout=90)
    expected = {f"execution {e} ended cancelled" for e in cancelled}
    assert sorted(set(anomalies) - expected) == []
    assert faults.count("cancelled") == ROUNDS
    assert faults.count("completed") == TAKERS - ROUNDS
