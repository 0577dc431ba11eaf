"""Workflows of the end-to-end tests; the worker imports them by autodiscovery."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from django.utils import timezone

from yieldstar_django import define_store, workflow
from yieldstar_django.runtime import Step

#: ``jobs/<id>``: items ``{"value", "claimed_by"}`` pushed by tests, claimed by takes.
jobs = define_store("e2e.jobs", None, initial=lambda id: {"items": []})


def first_unclaimed(state: Any) -> Any:
    """Selector: the first item nobody claimed yet."""
    for item in state["items"]:
        if item["claimed_by"] is None:
            return item
    return None


def claimed_by(execution_id: str) -> Any:
    def claim(draft: Any, selected: Any) -> None:
        selected["claimed_by"] = execution_id

    return claim


def push(store_id: str, values: list[Any]) -> None:
    """Append unclaimed items (what a producer does)."""
    from yieldstar_django import get_store_client

    get_store_client().update_store(
        jobs,
        store_id,
        updater=lambda d: d["items"].extend({"value": v, "claimed_by": None} for v in values),
    )


def now_iso() -> str:
    return timezone.now().isoformat()


def slow_once(marker_dir: str) -> int:
    """Append this attempt to a file; the first attempt hangs (to be SIGKILLed)."""
    attempts = Path(marker_dir) / "attempts"
    with attempts.open("a") as handle:
        handle.write(f"{os.getpid()}\n")
    count = len(attempts.read_text().splitlines())
    if count == 1:
        time.sleep(600)
    return count


@workflow("e2e.take_one")
def take_one(step: Step, store_id: str) -> Any:
    item = yield from step.take(jobs, store_id, first_unclaimed, claimed_by(step.execution_id))
    return item["value"]


@workflow("e2e.sleeper")
def sleeper(step: Step, seconds: float) -> Any:
    before = yield from step.run(now_iso)
    yield from step.sleep(seconds)
    after = yield from step.run(now_iso)
    return [before, after]


@workflow("e2e.slow_step")
def slow_step(step: Step, marker_dir: str) -> Any:
    attempt = yield from step.run(slow_once, marker_dir)
    after = yield from step.run(now_iso)
    return [attempt, after]


def pause_once(marker_dir: str) -> str:
    """Append this attempt's pid; the first attempt blocks until ``release`` exists (the
    test pauses its worker meanwhile), later ones return at once."""
    directory = Path(marker_dir)
    attempts = directory / "attempts"
    with attempts.open("a") as handle:
        handle.write(f"{os.getpid()}\n")
    count = len(attempts.read_text().splitlines())
    if count == 1:
        while not (directory / "release").exists():
            time.sleep(0.05)
    return f"attempt {count} in {os.getpid()}"


@workflow("e2e.paused_step")
def paused_step(step: Step, marker_dir: str) -> Any:
    value = yield from step.run(pause_once, marker_dir)
    return value


def pushed(values: list[Any]) -> Any:
    def append(draft: Any) -> None:
        draft["items"].extend({"value": v, "claimed_by": None} for v in values)

    return append


@workflow("e2e.pusher")
def pusher(step: Step, store_id: str, values: list[Any]) -> Any:
    """Pushes from a worker: the wakes of the takers go out from the worker's own thread."""
    yield from step.update(jobs, store_id, pushed(values))
    return len(values)


@workflow("e2e.quick")
def quick(step: Step) -> Any:
    return (yield from step.run(now_iso))


# -- take_any and leased claims ------------------------------------------------------------

#: ``leased/<id>``: a queue whose items a leased take hands back on expiry.
leased = define_store(
    "e2e.leased",
    None,
    initial=lambda id: {"items": [], "picked": []},
    release=lambda draft, value: draft["items"].append(value),
)


def first_item(state: Any) -> Any:
    return state["items"][0] if state["items"] else None


def pop_first(draft: Any, selected: Any) -> None:
    draft["items"].pop(0)


def pick_slowly(marker: str) -> str:
    """Record this attempt in ``marker``; hang if the marker says so (to be SIGKILLed)."""
    path = Path(marker)
    with path.open("a") as handle:
        handle.write(f"{os.getpid()}\n")
    if path.with_suffix(".hang").exists():
        path.with_suffix(".hang").unlink()
        time.sleep(600)
    return "picked"


@workflow("e2e.reply_or_timeout")
def reply_or_timeout(step: Step, store_id: str, timeout: float) -> Any:
    index, value = yield from step.take_any(
        [(jobs, store_id, first_unclaimed, claimed_by(step.execution_id))], timeout=timeout
    )
    return [index, value["value"] if value else None]


@workflow("e2e.lease_picker")
def lease_picker(step: Step, store_id: str, marker: str, lease_seconds: float) -> Any:
    lease = yield from step.take(leased, store_id, first_item, pop_first, lease=lease_seconds)
    yield from step.run(pick_slowly, marker)
    if (yield from step.complete(lease)):
        yield from step.update(leased, store_id, lambda d: d["picked"].append(lease.value))
        return lease.value
    return None


def letter(value: str) -> str:
    return value


@workflow("e2e.versioned")
def versioned(step: Step, seconds: float) -> Any:
    """``E2E_PATCHED=1`` in a worker's environment is the "new code" of a deploy."""
    done = [(yield from step.run(letter, "a"))]
    if os.environ.get("E2E_PATCHED") == "1" and (yield from step.patched("add-c")):
        done.append((yield from step.run(letter, "c")))
    yield from step.sleep(seconds)
    done.append((yield from step.run(letter, "b")))
    return done
