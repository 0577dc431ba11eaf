"""The workloads of the fault tests: executions draining a queue of items, and executions
writing a project's own table with atomic steps."""

from __future__ import annotations

import uuid

from .conftest import Faults


def fill_queue(faults: Faults, items: int) -> str:
    """A new queue holding ``items`` items, pushed one commit each; its id. (With no
    items the queue is created by its first operation.)"""
    queue_id = f"q-{uuid.uuid4().hex[:8]}"
    if items:
        faults.driver("push", queue_id, queue_id, str(items))
    return queue_id


def start_drain(
    faults: Faults,
    queue_id: str | list[str],
    executions: int,
    each: int,
    *,
    nap: float = 0.0,
    pause: float = 0.0,
) -> list[str]:
    """``executions`` executions per queue taking ``each`` items from it (after a durable
    ``nap`` of that many seconds, if any; working ``pause`` seconds on each item), each
    adding its count to the queue's tally. One driver run starts them all."""
    queues = [queue_id] if isinstance(queue_id, str) else queue_id
    if nap:
        arguments = [[q, f"t-{q}", each, nap] for q in queues for _ in range(executions)]
        return faults.start("faults.nap_then_drain", arguments)
    arguments = [[q, f"t-{q}", each, pause] for q in queues for _ in range(executions)]
    return faults.start("faults.drain", arguments)


def start_ledgers(faults: Faults, executions: int, steps: int, *, pause: float = 0.0) -> list[str]:
    """``executions`` executions of ``steps`` atomic steps each (``faults.ledger``: one
    ``Entry`` row and one increment of the execution's own tally per step, pausing
    ``pause`` seconds inside the step's transaction). One driver run starts them all."""
    tallies = [f"a-{uuid.uuid4().hex[:8]}-{n}" for n in range(executions)]
    ids = faults.start("faults.ledger", [[tally, steps, pause] for tally in tallies])
    faults.ledgers.update(zip(ids, tallies, strict=True))
    return ids
