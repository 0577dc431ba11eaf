"""Testing schedules with the ``yieldstar`` fixture: move the clock to a tick, run what it
started."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from zoneinfo import ZoneInfo

from yieldstar_django import clock, pause_schedule, trigger_schedule
from yieldstar_django.models import Execution, Schedule


def test_the_nightly_report_runs_at_three_in_paris(db: Any, yieldstar: Any) -> None:
    yieldstar.run_until_idle()  # copies the code's schedules to their table, as the relay does
    tick = Schedule.objects.get(name="nightly-report").next_tick_at
    assert tick.astimezone(ZoneInfo("Europe/Paris")).hour == 3

    yieldstar.advance_time(tick - clock.now())  # fires the tick: one execution
    yieldstar.run_until_idle()

    [execution] = Execution.objects.filter(schedule="nightly-report")
    assert execution.result == {"kind": "sales", "rows": 42}


def test_a_paused_schedule_runs_nothing_until_triggered(db: Any, yieldstar: Any) -> None:
    yieldstar.run_until_idle()
    pause_schedule("refresh-cache")
    yieldstar.advance_time(timedelta(hours=1))
    yieldstar.run_until_idle()
    assert not Execution.objects.filter(schedule="refresh-cache").exists()

    execution_id = trigger_schedule("refresh-cache")  # runs it now, paused or not
    yieldstar.run_until_idle()
    assert Execution.objects.get(pk=execution_id).status == "completed"
