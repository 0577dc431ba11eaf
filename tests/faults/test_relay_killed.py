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
    # The relay dies at once, 3 s before any nap's timer falls due: with a nap of 1 s and
    # half a second before the kill, a loaded machine (the driver and the first runs slow
    # to start) let the relay deliver some timers before it died, and their executions
    # completed with no relay.
    start_drain(faults, queue_id, executions=20, each=3, nap=3.0)
    relay.kill()
    time.sleep(4)  # the timers fall due with no relay
    assert faults.count("completed") == 0
    faults.start_relay()
    back = time.time()
    anomalies = faults.verify(timeout=120)
    faults.recoveries.append(faults.first_progress_after(back))
    assert anomalies == []
