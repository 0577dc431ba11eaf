"""``os._exit`` between a commit and its ``on_commit``: the wakes the commit wrote are
durable intents, and the relay delivers them.

Two sources of the fault: workers that die after one commit in ten that wakes someone
(``YIELDSTAR_FAULTS_EXIT_AFTER_COMMIT``), and a producer that dies right after its last
push committed, before handing the wake of the one waiting execution over."""

from __future__ import annotations

import time

from .conftest import EXIT_AFTER_COMMIT, FAULT_MARKS, Faults, wait_until
from .workload import fill_queue, start_drain

pytestmark = FAULT_MARKS


def test_processes_that_exit_between_commit_and_on_commit_lose_no_wake(faults: Faults) -> None:
    faults.start_workers(extra={EXIT_AFTER_COMMIT: "0.1"})
    faults.start_relay()
    queue_id = fill_queue(faults, 0)
    start_drain(faults, queue_id, executions=10, each=3)
    faults.driver("push", queue_id, "a", "29")
    wait_until("29 items taken", lambda: faults.count("completed") == 9, 120)
    # The last taker may still be resuming from a wake of the last claims (its waiter
    # marked woken): only a registered, unwoken waiter makes the push's commit wake it.
    wait_until("the last taker to wait", lambda: faults.waiting_to_be_woken() == 1, 60)
    faults.driver("push", queue_id, "last", "1", extra={EXIT_AFTER_COMMIT: "1"}, exit_code=3)
    moment = time.time()
    anomalies = faults.verify(timeout=120)
    faults.recoveries.append(faults.claimed_at("last-0") - moment)
    assert anomalies == []
