"""``run_until_complete`` and ``run_until_idle(skip_timers=True)``: the clock moves to the
next timer by itself, as in Temporal's time-skipping test environment.

Executions run for real against the test database; nothing is mocked.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import TestCase

from yieldstar_django import clock, get_execution, start_workflow
from yieldstar_django.models import ClaimLeaseRecord, Execution, WakeIntent
from yieldstar_django.testing import (
    ExecutionNotFinishedError,
    YieldstarTestMixin,
    next_timer,
    run_until_complete,
    run_until_idle,
)
from yieldstar_django.testing.pytest_plugin import YieldstarHelper

from . import workflows
from .workflows import (
    consumer,
    flaky_hour,
    hold_and_stall,
    sleep_forever,
    timeout_then_sleep,
)


@pytest.fixture(autouse=True)
def _attempts() -> None:
    workflows.ATTEMPTS.clear()


def _moved() -> float:
    """How far the clock was moved (the timers it skipped to were set a few milliseconds
    of wall time apart, hence the comparisons within a minute)."""
    return clock.offset().total_seconds()


def test_a_timeout_then_a_sleep_finish_in_one_call(db: None, yieldstar: YieldstarHelper) -> None:
    """Before, this took a run, an advance of an hour, a run, an advance of a day and a
    run, each computed by hand."""
    execution_id = start_workflow(timeout_then_sleep, "box-skip")
    execution = yieldstar.run_until_complete(execution_id)
    assert (execution.status, execution.result) == ("completed", ["slept", None, None])
    # The clock moved exactly to each timer: an hour, then a day (give or take the
    # milliseconds the runs took between them).
    assert abs(_moved() - (3600 + 86_400)) < 60
    assert not WakeIntent.objects.filter(execution_id=execution_id, delivered_at=None).exists()


def test_max_time_stops_before_a_timer_past_it(db: None, yieldstar: YieldstarHelper) -> None:
    execution_id = start_workflow(timeout_then_sleep, "box-max")
    with pytest.raises(ExecutionNotFinishedError) as raised:
        yieldstar.run_until_complete(execution_id, max_time=timedelta(hours=2))
    error = raised.value
    assert (error.execution_id, error.reason, error.status) == (
        execution_id,
        "max_time",
        "sleeping",
    )
    assert error.next_timer is not None and "max_time=7200s" in str(error)
    # It fired the timeout (one hour), not the day's sleep: the clock stays at the timeout.
    assert abs(_moved() - (3600)) < 60
    assert get_execution(execution_id).status == "sleeping"
    # A later call with room for the sleep finishes it.
    assert yieldstar.run_until_complete(execution_id).result == ["slept", None, None]


def test_an_execution_nothing_will_wake_is_reported(db: None, yieldstar: YieldstarHelper) -> None:
    execution_id = start_workflow(consumer, "box-empty")
    with pytest.raises(ExecutionNotFinishedError) as raised:
        run_until_complete(execution_id)
    error = raised.value
    assert (error.reason, error.status, error.next_timer) == ("idle", "waiting", None)
    assert error.waiting_on and "nothing is due and no timer is set" in str(error)
    assert _moved() == 0


def test_without_skipping_it_runs_only_what_is_due(db: None, yieldstar: YieldstarHelper) -> None:
    execution_id = start_workflow(flaky_hour)
    with pytest.raises(ExecutionNotFinishedError) as raised:
        run_until_complete(execution_id, skip_timers=False)
    assert (raised.value.reason, raised.value.status) == ("idle", "retrying")
    assert _moved() == 0
    assert run_until_complete(execution_id).result == "done"
    assert abs(_moved() - (2 * 3600)) < 60


def test_run_until_idle_skips_every_timer(db: None, yieldstar: YieldstarHelper) -> None:
    first = start_workflow(timeout_then_sleep, "box-a")
    second = start_workflow(flaky_hour)
    assert yieldstar.run_until_idle(skip_timers=True) == 6  # 3 runs each
    assert get_execution(first).status == get_execution(second).status == "completed"
    assert next_timer() is None


def test_run_until_idle_without_skipping_moves_no_clock(
    db: None, yieldstar: YieldstarHelper
) -> None:
    execution_id = start_workflow(timeout_then_sleep, "box-b")
    assert run_until_idle() == 1
    assert _moved() == 0
    assert get_execution(execution_id).status == "waiting"


def test_run_until_idle_stops_at_max_time(db: None, yieldstar: YieldstarHelper) -> None:
    """A workflow that always sets another timer: ``max_time`` ends the skipping (the
    clock at the last timer within it)."""
    execution_id = start_workflow(sleep_forever)
    runs = run_until_idle(skip_timers=True, max_time=5 * 3600 + 30)
    assert runs == 6  # the first run, then one per hour for five hours
    assert abs(_moved() - (5 * 3600)) < 60
    assert get_execution(execution_id).status == "sleeping"


def test_a_leased_claim_expiry_is_a_timer(db: None, yieldstar: YieldstarHelper) -> None:
    """The next event may be a leased claim's expiry: the clock moves to it, the value is
    handed back, and the workflow's own hour-long stall then ends."""
    execution_id = start_workflow(hold_and_stall, "box-lease")
    yieldstar.run_until_idle()
    record = ClaimLeaseRecord.objects.get()
    assert next_timer() == record.expires_at
    execution = yieldstar.run_until_complete(execution_id)
    assert execution.status == "completed"
    record.refresh_from_db()
    assert record.state == "expired"


def test_bad_arguments_are_refused_before_anything_runs(
    db: None, yieldstar: YieldstarHelper
) -> None:
    execution_id = start_workflow(timeout_then_sleep, "box-bad")
    for wrong in ("1h", True, [1]):
        with pytest.raises(TypeError):
            run_until_complete(execution_id, max_time=wrong)  # type: ignore[arg-type]
    for bad in (-1, float("nan")):
        with pytest.raises(ValueError):
            run_until_idle(skip_timers=True, max_time=bad)
    with pytest.raises(Execution.DoesNotExist):
        run_until_complete("no-such-execution")
    assert get_execution(execution_id).status == "pending"
    assert _moved() == 0


class MixinTimeSkippingTests(YieldstarTestMixin, TestCase):
    def test_the_mixin_skips_time_in_a_test_case(self) -> None:
        execution_id = start_workflow(timeout_then_sleep, "box-mixin")
        execution = self.run_until_complete(execution_id, max_time=timedelta(days=2))
        self.assertEqual(execution.result, ["slept", None, None])
