"""Durable timers when the relay's machine and a worker's disagree on the time.

A timer is written by a worker (due at its clock's now plus the delay) and claimed by a
relay (due once the relay's clock passes it); the run it wakes checks the time on its own
clock. A relay whose clock is ahead therefore delivers a timer early by that much: the run
finds it not due, waits again, and the timer must still fire once it is due.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from tests.shared import outside
from tests.shared.fixtures import WakeCollector, configure
from yieldstar_django import clock
from yieldstar_django.models import WakeIntent
from yieldstar_django.runtime import executions
from yieldstar_django.runtime.executions import ResumeResult
from yieldstar_django.runtime.registry import unregister_workflow, workflow
from yieldstar_django.runtime.steps import Step
from yieldstar_django.wakes import outbox, relay_once

#: How long the workflow sleeps, and how far ahead the relay's clock is.
SLEEP = 1.5
AHEAD = 0.8


@pytest.fixture
def routed(alias: str) -> Iterator[str]:
    with outside.runtime_on(alias):
        yield alias


@pytest.fixture
def sleeper() -> Iterator[str]:
    name = "clocks-sleeper"

    def wf(step: Step) -> Any:
        yield from step.sleep(SLEEP)
        return "slept"

    workflow(name)(wf)
    yield name
    unregister_workflow(name)


def relay_ahead(alias: str, monkeypatch: pytest.MonkeyPatch, seconds: float) -> Callable[[], int]:
    """One relay round on a machine whose clock is ``seconds`` ahead of this one."""

    def round_() -> int:
        with monkeypatch.context() as patch:
            patch.setattr(outbox, "_now", lambda: clock.now() + timedelta(seconds=seconds))
            return relay_once(using=alias)

    return round_


def relay_until_woken(
    relay: Callable[[], int], wakes: WakeCollector, execution_id: str, deadline: float
) -> datetime | None:
    """Run relay rounds every 50 ms until ``execution_id`` is woken (when, on this
    machine's clock), or ``None`` at ``deadline`` (``time.monotonic()``)."""
    while time.monotonic() < deadline:
        relay()
        if any(w.execution_id == execution_id for w in wakes):
            return timezone.now()
        time.sleep(0.05)
    return None


def test_a_sleep_woken_early_by_a_relay_clock_ahead_still_ends_when_due(
    routed: str, sleeper: str, wakes: WakeCollector, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run woken early waits again with its timer, which the early delivery had
    pushed back by ``RELAY_DELAY`` (doubling): the sleep ended ``RELAY_DELAY`` after that
    delivery, about 4 s late here, instead of once due."""
    alias = routed
    relay = relay_ahead(alias, monkeypatch, AHEAD)
    with configure(RELAY_DELAY=5.0, RELAY_INTERVAL=0.05):
        outside.start(alias, sleeper, "e1")
        assert executions.run_execution("e1") == ResumeResult.SUSPENDED
        timer = WakeIntent.objects.using(alias).get(execution_id="e1", reason="sleep")
        assert timer.due_at is not None
        due = timer.due_at

        woken = relay_until_woken(relay, wakes, "e1", time.monotonic() + SLEEP + 5)
        assert woken is not None and woken < due, "the relay's clock delivered it early"
        assert executions.run_execution("e1") == ResumeResult.SUSPENDED, "not due here yet"

        # The relay and a worker go on, as they would: the sleep ends once due here.
        deadline = time.monotonic() + (due - timezone.now()).total_seconds() + 1.5
        runs = 0
        while time.monotonic() < deadline:
            wakes.clear()
            if relay_until_woken(relay, wakes, "e1", deadline) is None:
                break
            runs += 1
            if executions.run_execution("e1") == ResumeResult.FINISHED:
                break
            time.sleep(0.05)  # the relay's next round (RELAY_INTERVAL)
        timer.refresh_from_db()
        assert timer.delivered_at is not None, (
            f"not finished within 1.5 s of its due time; the timer is available "
            f"{timer.available_at - due} after it"
        )
        assert timer.delivered_at >= due
        assert runs <= AHEAD / 0.05 + 2, f"{runs} runs"
    assert WakeIntent.objects.using(alias).filter(delivered_at__isnull=True).count() == 0
