"""The workload of the fault suite: executions draining queues of items, and executions
writing a project's own table with ``step.atomic`` (``faults.ledger``).

Updaters and claims are small objects that carry ``history_args``, the model operation of
:mod:`tests.faults.checker` they apply, so the recorder can write it into the history.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

from django.db import transaction

from yieldstar_django import define_queue, define_store, get_store_client, workflow
from yieldstar_django.runtime import Step

from .history import ENV as HISTORY_ENV, INITIAL

#: ``faults.queue/<id>``: items ``{"value", "claimed_by"}``.
queue = define_store(
    "faults.queue", None, initial=lambda id: copy.deepcopy(INITIAL["faults.queue"])
)
#: ``faults.tally/<id>``: how many items the executions reported.
tally = define_store(
    "faults.tally", None, initial=lambda id: copy.deepcopy(INITIAL["faults.tally"])
)


def first_unclaimed(state: Any) -> Any:
    for item in state["items"]:
        if item["claimed_by"] is None:
            return item
    return None


class Claim:
    """Claim the selected item for one execution."""

    def __init__(self, by: str) -> None:
        self.history_args = {"kind": "take", "by": by}

    def __call__(self, draft: Any, selected: Any) -> None:
        selected["claimed_by"] = self.history_args["by"]


class Push:
    """Append unclaimed items."""

    def __init__(self, values: list[Any]) -> None:
        self.history_args = {"kind": "push", "values": list(values)}

    def __call__(self, draft: Any) -> None:
        draft["items"].extend({"value": v, "claimed_by": None} for v in self.history_args["values"])


class Add:
    def __init__(self, amount: int) -> None:
        self.history_args = {"kind": "add", "amount": amount}

    def __call__(self, draft: Any) -> None:
        draft["total"] += self.history_args["amount"]


def push(queue_id: str, values: list[Any]) -> None:
    get_store_client().update_store(queue, queue_id, updater=Push(values))


def work(seconds: float) -> None:
    """Stand-in for the work done on an item (a step a worker can die in)."""
    time.sleep(seconds)


@workflow("faults.drain")
def drain(step: Step, queue_id: str, tally_id: str, count: int, pause: float = 0.0) -> Any:
    """Take ``count`` items from a queue (working ``pause`` seconds on each), then add
    ``count`` to a tally; the item values."""
    values = []
    for _ in range(count):
        item = yield from step.take(queue, queue_id, first_unclaimed, Claim(step.execution_id))
        values.append(item["value"])
        if pause:
            yield from step.run(work, pause)
    yield from step.update(tally, tally_id, Add(count))
    return values


@workflow("faults.nap_then_drain")
def nap_then_drain(step: Step, queue_id: str, tally_id: str, count: int, seconds: float) -> Any:
    """Sleep on a durable timer (only the relay delivers it), then drain."""
    yield from step.sleep(seconds)
    return (yield from drain(step, queue_id, tally_id, count))


def write_entry(execution_id: str, index: int, tally_id: str, pause: float) -> str:
    """An atomic step's work: one ``Entry`` row for step ``index`` (a new token), a pause
    (a step a worker can die in, its transaction open), one increment of the tally
    ``tally_id`` through the store client; the token."""
    from tests.shared.models import Entry

    token = uuid.uuid4().hex
    Entry.objects.create(execution_id=execution_id, step=str(index), token=token)
    if pause:
        time.sleep(pause)
    get_store_client().update_store(tally, tally_id, updater=Add(1))
    return token


@workflow("faults.ledger")
def ledger(step: Step, tally_id: str, steps: int, pause: float = 0.0) -> Any:
    """``steps`` atomic steps, each writing its ``Entry`` row and adding 1 to the tally;
    the tokens the steps returned, in order."""
    tokens = []
    for index in range(steps):
        token = yield from step.atomic(
            write_entry, step.execution_id, index, tally_id, pause, key=f"entry-{index}"
        )
        tokens.append(token)
    return tokens


def add(tally_id: str, amount: int) -> None:
    get_store_client().update_store(tally, tally_id, updater=Add(amount))


def steps_file() -> Path:
    """Where the processes note each step of ``faults.grind`` they start: one JSON line per
    step, ``{"execution", "index", "pid", "at"}`` (``steps-<pid>.log`` in the history
    folder)."""
    return Path(os.environ[HISTORY_ENV]) / f"steps-{os.getpid()}.log"


def grind_step(execution_id: str, index: int, seconds: float) -> int:
    """A step of ``faults.grind``: note its start, then work ``seconds``."""
    line = {"execution": execution_id, "index": index, "pid": os.getpid(), "at": time.time()}
    with steps_file().open("a") as handle:
        handle.write(json.dumps(line) + "\n")
    time.sleep(seconds)
    return index


@workflow("faults.grind")
def grind(step: Step, tally_id: str, steps: int, seconds: float) -> Any:
    """``steps`` steps of ``seconds`` of work each (a long run that keeps its pool process
    busy), then add ``steps`` to a tally. Takes no item: returns ``[]`` (the items the
    queue check counts)."""
    for index in range(steps):
        yield from step.run(grind_step, step.execution_id, index, seconds)
    yield from step.update(tally, tally_id, Add(steps))
    return []


def freeze_in_commit(tally_id: str, marker: str) -> int:
    """Add 1 to a tally in a transaction of its own and, the first time (``marker`` does
    not exist yet), stop this process (SIGSTOP) before that transaction commits: the
    worker freezes holding the tally's row lock, as a paused VM or a debugger would. The
    test resumes it (SIGCONT); the marker names the process to resume."""
    with transaction.atomic():
        add(tally_id, 1)
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return 0
        os.write(fd, json.dumps({"pid": os.getpid(), "at": time.time()}).encode())
        os.close(fd)
        os.kill(os.getpid(), signal.SIGSTOP)
    return 1


@workflow("faults.freeze_holding")
def freeze_holding(step: Step, tally_id: str, marker: str) -> Any:
    """Add to a tally in a step that freezes its worker mid-transaction the first time.
    Takes no item: returns ``[]``."""
    yield from step.run(freeze_in_commit, tally_id, marker)
    return []


def child_probe(execution_id: str, pause: float) -> str:
    """A child's atomic step: one ``Entry`` row (the probe: a child whose step committed
    twice leaves two), then a pause with its transaction open; the row's token."""
    from tests.shared.models import Entry

    token = uuid.uuid4().hex
    Entry.objects.create(execution_id=execution_id, step="child", token=token)
    if pause:
        time.sleep(pause)
    return token


def write_tick(execution_id: str, pause: float) -> str:
    """A schedule tick's work: one ``Entry`` row (a new token), then a pause (a step a
    worker can die in, its transaction open); the token."""
    from tests.shared.models import Entry

    token = uuid.uuid4().hex
    Entry.objects.create(execution_id=execution_id, step="0", token=token)
    if pause:
        time.sleep(pause)
    return token


@workflow("faults.child")
def child(step: Step, index: int, pause: float) -> Any:
    """One atomic step writing the child's probe row; ``[index, token]``."""
    token = yield from step.atomic(child_probe, step.execution_id, pause, key="probe")
    return [index, token]


@workflow("faults.fan_out")
def fan_out(step: Step, count: int, pause: float) -> Any:
    """Start ``count`` children of ``faults.child`` in one step and gather them."""
    ids = yield from step.start_many(child, [[i, pause] for i in range(count)], key="children")
    results = yield from step.gather(ids, key="gather")
    return {"children": ids, "results": results}


@workflow("faults.tick")
def tick(step: Step, pause: float = 0.0) -> Any:
    """What a schedule's tick starts: one atomic step writing its ``Entry`` row; the token
    it returned, in a list (``check_entries``'s shape)."""
    token = yield from step.atomic(write_tick, step.execution_id, pause, key="entry-0")
    return [token]


#: The queues of ``test_queue_faults``: at most 3 running, 2 of one key; 5 starts a second.
limited = define_queue("faults.limited", concurrency=3, per_key=2)
rated = define_queue("faults.rated", rate=(5, 1.0))


def probes_file() -> Path:
    """Where the processes note each attempt of ``faults.probed``'s work: one JSON line
    per note, ``{"execution", "event": "begin" | "end", "at"}`` (``probes-<pid>.log`` in
    the history folder; appends of one line are atomic)."""
    return Path(os.environ[HISTORY_ENV]) / f"probes-{os.getpid()}.log"


def probe(execution_id: str, seconds: float) -> int:
    """The work of an execution of a queue: noted when it begins and when it ends."""
    for event in ("begin", "end"):
        line = {"execution": execution_id, "event": event, "at": time.time()}
        with probes_file().open("a") as handle:
            handle.write(json.dumps(line) + "\n")
        if event == "begin":
            time.sleep(seconds)
    return 0


@workflow("faults.probed")
def probed(step: Step, seconds: float) -> Any:
    """Work ``seconds`` in one step that notes its attempts. Takes no item: ``[]``."""
    yield from step.run(probe, step.execution_id, seconds)
    return []
