"""PostgreSQL faults under load: the cluster restarted with ``-m immediate`` (crash
recovery, every connection dropped), and the workers' connections terminated with
``pg_terminate_backend`` every 0.5 s for 20 s."""

from __future__ import annotations

import time

from .conftest import FAULT_MARKS, Faults
from .workload import fill_queue, start_drain

pytestmark = FAULT_MARKS


def test_postgres_restarted_immediately_under_load(faults: Faults) -> None:
    faults.start_workers()
    faults.start_relay()
    queue_id = fill_queue(faults, 200)
    # Each execution works 10 x 0.25 s, so none can have finished when the crash comes
    # (with 0.05 s, faster commits let all 20 finish within the 2 s).
    start_drain(faults, queue_id, executions=20, each=10, pause=0.25)
    time.sleep(2)
    assert faults.count("completed") < 20  # the crash comes under load
    faults.cluster.crash()
    time.sleep(3)
    faults.cluster.start()
    back = time.time()
    anomalies = faults.verify(timeout=120)
    faults.recoveries.append(faults.first_progress_after(back))
    assert anomalies == []


def test_workers_connections_terminated_every_half_second(faults: Faults) -> None:
    faults.start_workers()
    faults.start_relay()
    queue_ids = [fill_queue(faults, 0) for _ in range(4)]
    start_drain(faults, queue_ids, executions=5, each=10, pause=0.02)
    # Items keep coming while connections are cut: 200 pushes over about 16 s.
    producer = faults.push_in_background(",".join(queue_ids), "item", 200, 0.06)
    deadline = time.monotonic() + 20
    terminated = 0
    cuts: list[float] = []
    while time.monotonic() < deadline:
        time.sleep(0.5)
        terminated += faults.cluster.terminate_backends()
        cuts.append(time.time())
    assert producer.popen.wait(120) == 0
    anomalies = faults.verify(timeout=120)
    faults.recoveries += [faults.first_progress_after(cut) for cut in cuts]
    assert terminated > 0
    assert anomalies == []
