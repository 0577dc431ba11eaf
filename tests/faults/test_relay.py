"""The relay SIGKILLed while durable timers are due, and restarted: every timer is
delivered once it is back (only the relay delivers timers)."""

from __future__ import annotations

import time

from .conftest import FAULT_MARKS, Faults
from .workload import fill_queue, start_drain

pytestmark = FAULT_MARKS


def test_relay_sigkilled_and_restarted(faults: Faults) -> None:
    faults.start_workers()
    relay = faults.start_relay()
    queue_id = fill_queue(faults, 60)
    start_drain(faults, queue_id, executions=20, each=3, nap=1.0)
    time.sleep(0.5)
    relay.kill()
    time.sleep(4)  # the timers fall due with no relay
    assert faults.count("completed") == 0
    faults.start_relay()
    back = time.time()
    anomalies = faults.verify(timeout=120)
    faults.recoveries.append(faults.first_progress_after(back))
    assert anomalies == []
