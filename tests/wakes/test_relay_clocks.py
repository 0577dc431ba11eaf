"""Durable timers when the relay's machine and a worker's disagree on the time.

A timer is written by a worker (due at its clock's now plus the delay) and claimed by a
relay (due once the relay's clock passes it); the run it wakes checks the time on its own
clock. A relay whose clock is ahead therefore delivers a timer early by that much: the run
finds it not due, waits again, and the timer must still fire once it is due.

The timers' clock is moved with ``clock.advance``, not by waiting, so what the test sees
does not depend on how fast a loaded machine runs it: every step of it has a minute of
the timers' time to spare.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from tests.shared import outside
from tests.shared.fixtures import WakeCollector, configure
from yieldstar_django import clock
from yieldstar_django.models import WakeIntent
from yieldstar_django.runtime import executions
from yieldstar_django.runtime.executions import ResumeResult
from yieldstar_django.runtime.registry import unregister_workflow, workflow
from yieldstar_django.runtime.steps import Step
from yieldstar_django.wakes import outbox, relay_once

#: How long the workflow sleeps; how far ahead the relay's clock is; the relay's redelivery
#: delay, longer than that lead: a timer pushed back by it after an early delivery would
#: stay undeliverable past its due time on the relay's clock too.
SLEEP = 3600.0
AHEAD = 60.0
RELAY_DELAY = 300.0


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


def woken(wakes: WakeCollector) -> list[str]:
    return [w.execution_id for w in wakes]


def test_a_sleep_woken_early_by_a_relay_clock_ahead_still_ends_when_due(
    routed: str, sleeper: str, wakes: WakeCollector, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each early delivery wakes a run that finds the sleep not due and makes its timer
    deliverable at its due time again (a delivery pushes it back by ``RELAY_DELAY``): the
    first relay round once it is due here ends the sleep, ``RELAY_DELAY`` sooner than
    without that."""
    alias = routed
    relay = relay_ahead(alias, monkeypatch, AHEAD)
    try:
        with configure(RELAY_DELAY=RELAY_DELAY):
            outside.start(alias, sleeper, "e1")
            assert executions.run_execution("e1") == ResumeResult.SUSPENDED
            timer = WakeIntent.objects.using(alias).get(execution_id="e1", reason="sleep")
            assert timer.due_at is not None
            due = timer.due_at
            assert relay() == 0, "not due on the relay's clock yet"

            clock.advance(SLEEP - AHEAD / 2)  # due on the relay's clock, not here
            for early in range(2):
                wakes.clear()
                assert relay() == 1 and woken(wakes) == ["e1"], f"early delivery {early}"
                assert clock.now() < due
                assert executions.run_execution("e1") == ResumeResult.SUSPENDED, "not due"

            clock.advance(AHEAD / 2)  # due here
            wakes.clear()
            delivered = relay()
            timer.refresh_from_db()
            assert delivered == 1 and woken(wakes) == ["e1"], (
                f"not delivered once due: deliverable {timer.available_at - due} after it"
            )
            assert executions.run_execution("e1") == ResumeResult.FINISHED
            timer.refresh_from_db()
            assert timer.delivered_at is not None and timer.delivered_at >= due
        assert WakeIntent.objects.using(alias).filter(delivered_at__isnull=True).count() == 0
    finally:
        clock.reset()
