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


@workflow("e2e.quick")
def quick(step: Step) -> Any:
    return (yield from step.run(now_iso))
