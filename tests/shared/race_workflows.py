"""Workflows that the racing tests run in several processes at once (``test_runtime_races``).

Imported by the test and, in each child, by the worker functions that run them: both
register the same workflows. ``PAUSE`` is a hook the children set (a barrier to meet) and
the workflows call at the critical point; it does nothing in the test's own process.
``log`` arguments name a file to which each process appends what it did, one line per
event (``O_APPEND`` writes of a line are atomic between processes).
"""

from __future__ import annotations

import os
import random
import time
import uuid
from collections.abc import Callable, Generator
from typing import Any

from tests.polling import HANG_SECONDS
from yieldstar_django.core.definition import StoreDefinition
from yieldstar_django.runtime import Step, workflow
from yieldstar_django.runtime.queues import define_queue

#: Called by the workflows at the point the racing processes meet (set in the children).
PAUSE: Callable[[], None] = lambda: None  # noqa: E731

#: A store ``{"n": 0}``, one instance per execution (its id is the store id).
COUNTER = StoreDefinition("race-runtime-counter", None, lambda id: {"n": 0})


def log(path: str, event: str) -> None:
    """Append ``event`` and this process's id to the file ``path``."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{event} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


def read_log(path: str) -> list[str]:
    """The events appended to ``path`` (without their process ids), in order."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as file:
        return [line.split(" ")[0] for line in file.read().splitlines()]


def _increment(draft: Any) -> None:
    PAUSE()
    draft["n"] += 1


@workflow("race-update-once")
def update_once(step: Step, store_id: str) -> Generator[Any, Any, list[int]]:
    """Increment the counter ``store_id`` by one ``step.update``; its version and count."""
    result = yield from step.update(COUNTER, store_id, _increment, key="inc")
    return [result.version, result.state["n"]]


def _hold(path: str) -> str:
    log(path, "hold")
    PAUSE()
    return "held"


@workflow("race-held-run")
def held_run(step: Step, path: str) -> Generator[Any, Any, None]:
    """Log each (re)play of the body, then a ``run`` step that meets ``PAUSE``, then sleep
    for an hour (so the run suspends, where a pending wake makes it run again)."""
    log(path, "start")
    yield from step.run(_hold, path)
    yield from step.sleep(3600)


@workflow("race-other")
def other(step: Step, *args: Any) -> Generator[Any, Any, None]:
    """Another workflow, whose start under a taken id is refused."""
    yield from step.sleep(3600)


def write_entry(execution_id: str) -> str:
    """Write an ``Entry`` of the step ``once`` with a new token, meet ``PAUSE``; the
    token."""
    from tests.shared.models import Entry

    token = uuid.uuid4().hex
    Entry.objects.create(execution_id=execution_id, step="once", token=token)
    PAUSE()
    return token


@workflow("race-atomic-once")
def atomic_once(step: Step) -> Generator[Any, Any, str]:
    """One ``step.atomic`` that writes an ``Entry`` (and meets ``PAUSE``); its token."""
    return (yield from step.atomic(write_entry, step.execution_id, key="once"))


def write_entry_gated(execution_id: str, inside: str, go: str) -> str:
    """Write an ``Entry`` with a new token; the first caller (the one that creates the
    file ``inside``) then waits for the file ``go`` to exist. The token."""
    from tests.shared.models import Entry

    token = uuid.uuid4().hex
    Entry.objects.create(execution_id=execution_id, step="once", token=token)
    try:
        os.close(os.open(inside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return token
    deadline = time.monotonic() + HANG_SECONDS
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            raise AssertionError(f"{go} was not created")
        time.sleep(0.02)
    return token


@workflow("race-atomic-gated")
def atomic_gated(step: Step, inside: str, go: str) -> Generator[Any, Any, str]:
    """One ``step.atomic`` whose first run waits inside its function (``write_entry_gated``);
    its token."""
    return (yield from step.atomic(write_entry_gated, step.execution_id, inside, go, key="once"))


def _until_fixed(path: str) -> str:
    """Fail until the file ``path`` exists (the fix of a failing step, deployed)."""
    log(path + ".log", "attempt")
    if not os.path.exists(path):
        raise RuntimeError("not fixed yet")
    return "fixed"


@workflow("race-repair")
def repair(step: Step, store_id: str, path: str) -> Generator[Any, Any, list[Any]]:
    """Increment the counter ``store_id``, then run a step that fails until ``path``
    exists: an execution that fails, to be retried or forked."""
    result = yield from step.update(COUNTER, store_id, _increment, key="inc")
    fixed = yield from step.run(_until_fixed, path, key="fix")
    return [result.state["n"], fixed]


#: The queues the racing queue tests start into (``test_queue_races``).
RACE_QUEUE = define_queue("race-queue", concurrency=3, per_key=2)
RATED_QUEUE = define_queue("race-rated-queue", rate=(4, 1.0))


def _probe(path: str, execution_id: str, key: str) -> str:
    """Log ``begin`` and ``end`` around a short pause: the probe of a running execution."""
    log(path, f"begin:{execution_id}:{key}")
    time.sleep(random.uniform(0.005, 0.03))
    log(path, f"end:{execution_id}:{key}")
    return key


@workflow("race-queued")
def queued(step: Step, path: str, key: str) -> Generator[Any, Any, str]:
    """Run the probe once: what the queue bounds is the time between its lines."""
    result: str = yield from step.run(_probe, path, step.execution_id, key)
    return result


@workflow("race-child")
def race_child(step: Step, n: int) -> Generator[Any, Any, int]:
    """A child of ``race-start-children``: returns its argument."""
    yield from step.sleep(0)
    return n


@workflow("race-start-children")
def start_children(step: Step, n: int) -> Generator[Any, Any, list[str]]:
    """Meet ``PAUSE``, then start ``n`` children of ``race-child`` in one step."""
    PAUSE()
    ids: list[str] = yield from step.start_many("race-child", [[i] for i in range(n)], key="kids")
    return ids
