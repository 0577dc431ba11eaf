"""The workload every fault test runs: executions draining a queue of items."""

from __future__ import annotations

import uuid

from .conftest import Faults


def fill_queue(faults: Faults, items: int) -> str:
    """A new queue holding ``items`` items, pushed one commit each; its id."""
    queue_id = f"q-{uuid.uuid4().hex[:8]}"
    faults.driver("push", queue_id, queue_id, str(items))
    return queue_id


def start_drain(
    faults: Faults,
    queue_id: str,
    executions: int,
    each: int,
    *,
    nap: float = 0.0,
    pause: float = 0.0,
) -> list[str]:
    """``executions`` executions taking ``each`` items from the queue (after a durable
    ``nap`` of that many seconds, if any; working ``pause`` seconds on each item), each
    adding its count to one tally."""
    tally_id = f"t-{queue_id}"
    if nap:
        return faults.start(
            "faults.nap_then_drain", [[queue_id, tally_id, each, nap]] * executions
        )
    return faults.start("faults.drain", [[queue_id, tally_id, each, pause]] * executions)
