"""The broker (Redis, then RabbitMQ) unreachable for 30 s while 500 commits happen: each
commit wakes an execution; every wake is delivered once the broker is reachable again."""

from __future__ import annotations

import time

import pytest

from .conftest import FAULT_MARKS, Broker, Faults, wait_until
from .workload import fill_queue, start_drain

pytestmark = FAULT_MARKS

OUTAGE = 30.0


@pytest.fixture
def broker(cut_broker: Broker) -> Broker:
    """The worlds of this module run on a broker the test can cut (once per broker)."""
    return cut_broker


def test_broker_unreachable_for_30s_while_500_commits_happen(faults: Faults) -> None:
    faults.start_workers()
    faults.start_relay()
    queue_ids = [fill_queue(faults, 0) for _ in range(25)]
    start_drain(faults, queue_ids, executions=1, each=20)
    wait_until("every execution to wait", lambda: faults.count("waiting") == len(queue_ids), 60)
    faults.broker.down()
    cut = time.monotonic()
    try:
        # 500 commits, one item each, spread over the outage.
        producer = faults.push_in_background(",".join(queue_ids), "item", 500, 0.04)
        assert producer.popen.wait(120) == 0
        time.sleep(max(0.0, OUTAGE - (time.monotonic() - cut)))
        assert faults.count("completed") == 0
    finally:
        faults.broker.up()
    back = time.time()
    anomalies = faults.verify(timeout=150)
    faults.recoveries.append(faults.first_progress_after(back))
    assert anomalies == []
