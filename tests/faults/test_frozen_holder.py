"""A worker frozen for 30 s holding a store's row lock, on Redis and on RabbitMQ.

A writer (the driver) adds to a tally, one commit every 0.1 s. A run then commits a change
of the same tally in a transaction of its step's and, before that transaction ends, its
pool process stops itself with SIGSTOP (a paused VM, a long GC pause or a debugger do the
same): its backend sits ``idle in transaction`` with the tally's row locked, and the
writer waits for it. The run's lease expires (its keeper thread is stopped too); the relay
then ends that backend's transaction (``Execution.lease_backend``), and the writer goes
on. Target: no gap between two of the tally's commits longer than the lease plus 2 s.
After SIGCONT the frozen run finds its connection closed and its lease lost: its change
was rolled back, its successor ran the step again, and the checker finds the tally's
history linearizable (nothing lost, nothing counted twice).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import sys
import time
import uuid

import pytest

from tests.polling import wait_until

from .checker import load_history
from .conftest import FAULT_MARKS, Broker, Faults

pytestmark = FAULT_MARKS

FROZEN = 30.0
#: The bound on a writer's wait behind the frozen worker: the lease plus this.
MARGIN = 2.0


@pytest.fixture
def broker(cut_broker: Broker) -> Broker:
    """The worlds of this module run on Redis, then on RabbitMQ."""
    return cut_broker


def test_a_worker_frozen_holding_a_store_row_lock(faults: Faults) -> None:
    faults.start_workers(count=2, concurrency=2)
    faults.start_relay()
    tally_id = f"t-{uuid.uuid4().hex[:8]}"
    writer = faults.spawn(
        "driver", [sys.executable, "-m", "tests.faults.driver", "add", tally_id, "500", "0.1"]
    )
    time.sleep(2.0)
    marker = faults.directory / "frozen.json"
    faults.start("faults.freeze_holding", [[tally_id, str(marker)]])
    wait_until("a worker to freeze in its transaction", marker.exists, 60)
    time.sleep(0.2)  # the marker is written just before the SIGSTOP
    frozen = json.loads(marker.read_text())
    try:
        time.sleep(max(0.0, frozen["at"] + FROZEN - time.time()))
    finally:
        os.kill(frozen["pid"], signal.SIGCONT)
    assert writer.popen.wait(180) == 0, writer.output()[-3000:]
    anomalies = faults.verify(timeout=90)
    faults.recoveries.append(longest_wait(faults, tally_id, frozen["at"], FROZEN))
    assert anomalies == []
    assert faults.recoveries[-1] <= faults.lease_seconds + MARGIN, faults.recoveries


def longest_wait(faults: Faults, tally_id: str, since: float, seconds: float) -> float:
    """The longest time without a commit of the tally from ``since`` to ``seconds``
    later (from ``since`` to the first commit after it included)."""
    ops = load_history(faults.history)[f"faults.tally/{tally_id}"]
    times = sorted(op.complete for op in ops if op.complete is not None)
    window = [since, *(t for t in times if since < t <= since + seconds)]
    later = [t for t in times if t > since + seconds]
    if later:
        window.append(later[0])
    return max(b - a for a, b in itertools.pairwise(window))
