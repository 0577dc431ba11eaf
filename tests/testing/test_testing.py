"""``yieldstar_django.testing``: the inline backend, run_until_idle, advance_time, the
fixture and mixin, and the guard against publishing to a broker during tests.

Executions run for real against the test database (PostgreSQL or SQLite, whichever
``DATABASE_URL`` names); nothing is mocked.
"""

from __future__ import annotations

import importlib.metadata
import math
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from celery import Celery, _state
from django.conf import settings
from django.test import TestCase, override_settings
from django.utils import timezone

from tests.polling import HANG_SECONDS
from yieldstar_django import clock, get_execution, get_store_client, start_workflow, testing
from yieldstar_django.conf import MAX_SECONDS, yieldstar_settings
from yieldstar_django.core.results import Wake
from yieldstar_django.models import ClaimLeaseRecord, WakeIntent
from yieldstar_django.runtime import workflow
from yieldstar_django.runtime.registry import unregister_workflow
from yieldstar_django.testing import (
    INLINE,
    BrokerInTestsError,
    YieldstarTestMixin,
    advance_time,
    run_until_idle,
    runner,
)
from yieldstar_django.testing.pytest_plugin import YieldstarHelper, pytest_report_header
from yieldstar_django.wakes import celery_backend, relay_once
from yieldstar_django.wakes.guard import in_test_environment, refuse_in_tests

from . import workflows
from .example.workflows import remind_tomorrow
from .workflows import (
    answer_within_an_hour,
    busy_until,
    consumer,
    flaky_hour,
    hold_and_stall,
    ping_pong,
    producer,
    restless,
)


@pytest.fixture(autouse=True)
def _attempts() -> None:
    workflows.ATTEMPTS.clear()


@pytest.fixture
def project_app(monkeypatch: pytest.MonkeyPatch) -> Iterator[Celery]:
    """A project's Celery app as the current app (its broker URL carries a password)."""
    monkeypatch.setenv("CELERY_BROKER_URL", "redis://user:s3cret@127.0.0.1:1/0")
    app = Celery("ys-guard", set_as_current=False)
    previous = _state.get_current_app()
    _state._set_current_app(app)
    try:
        yield app
    finally:
        _state._set_current_app(previous)


# -- the clock ------------------------------------------------------------------------


def test_advance_time_moves_the_timer_clock_only_forward() -> None:
    try:
        before = clock.now()
        advance_time(86_400)
        assert clock.offset() == timedelta(days=1)
        assert clock.now() - before >= timedelta(days=1)
        assert clock.now() - timezone.now() >= timedelta(days=1) - timedelta(seconds=1)
        for bad in (-1, math.nan, math.inf):
            with pytest.raises(ValueError):
                advance_time(bad)
        for wrong in ("1", True, None):
            with pytest.raises(TypeError):
                advance_time(wrong)  # type: ignore[arg-type]
        assert clock.offset() == timedelta(days=1)
        advance_time(timedelta(hours=1))
        assert clock.offset() == timedelta(days=1, hours=1)
    finally:
        clock.reset()
    assert clock.offset() == timedelta(0)


def test_advance_time_refuses_a_move_past_what_timers_can_hold() -> None:
    """A move that would leave no room for the longest durable timer (100 years) past
    the clock is a ``ValueError``, and leaves the clock where it was. Before, a move past
    ``timedelta``'s range raised ``OverflowError``, and a smaller one past year 9999
    (``10**12`` seconds, say) was taken: from then on every ``clock.now()`` (every step,
    ``run_until_idle()``, the relay) raised ``OverflowError``."""
    try:
        advance_time(60)
        for huge in (1e20, 10**12, 3e11, timedelta(days=365 * 7950)):
            with pytest.raises(ValueError, match="100 years"):
                advance_time(huge)
            assert clock.offset() == timedelta(seconds=60)
        clock.now() + timedelta(seconds=MAX_SECONDS)  # the longest timer still fits
    finally:
        clock.reset()


def test_timers_run_after_a_long_move(db: None, yieldstar: YieldstarHelper) -> None:
    """Five thousand years on, a one-day sleep still sleeps one day."""
    yieldstar.advance_time(timedelta(days=365 * 5000))
    execution_id = start_workflow(remind_tomorrow, "order-5000")
    assert yieldstar.run_until_idle() == 1
    assert get_execution(execution_id).status == "sleeping"
    yieldstar.advance_time(86_399)
    assert yieldstar.run_until_idle() == 0
    yieldstar.advance_time(1)
    assert yieldstar.run_until_idle() == 1
    assert get_execution(execution_id).status == "completed"


@pytest.mark.xdist_group("clock-put-back")
class TestTheClockIsPutBackAfterEveryTest:
    """Under pytest the plugin puts the clock back after every test, also one that moved
    it with the bare ``advance_time`` (no fixture, no mixin). Before, the clock stayed
    moved for every later test of the session: its timers were due early."""

    def test_moves_the_clock_with_the_bare_function(self) -> None:
        advance_time(3600)
        assert clock.offset() == timedelta(hours=1)

    def test_runs_after_it_on_wall_clock_time(self) -> None:
        assert clock.offset() == timedelta(0)


# -- run_until_idle -------------------------------------------------------------------


def test_retry_delays_read_the_clock(db: None, yieldstar: YieldstarHelper) -> None:
    execution_id = start_workflow(flaky_hour)
    assert get_execution(execution_id).status == "pending"  # nothing ran by itself
    assert yieldstar.run_until_idle() == 1
    assert workflows.ATTEMPTS == [1]
    assert get_execution(execution_id).status == "retrying"

    yieldstar.advance_time(3599)
    assert yieldstar.run_until_idle() == 0
    yieldstar.advance_time(1)
    assert yieldstar.run_until_idle() == 1
    assert workflows.ATTEMPTS == [1, 2]
    yieldstar.advance_time(3600)
    assert yieldstar.run_until_idle() == 1
    execution = get_execution(execution_id)
    assert (execution.status, execution.result) == ("completed", "done")


def test_a_take_any_timeout_reads_the_clock(db: None, yieldstar: YieldstarHelper) -> None:
    """The timeout of ``take_any`` is a durable timer like the others: due when the clock
    says so (before, its run read wall-clock time, found the hour not over, and waited
    again with a timer due at once: ``run_until_idle`` ran it until its timeout)."""
    execution_id = start_workflow(answer_within_an_hour, "box-t")
    assert yieldstar.run_until_idle() == 1
    assert get_execution(execution_id).status == "waiting"
    yieldstar.advance_time(3599)
    assert yieldstar.run_until_idle() == 0
    yieldstar.advance_time(1)
    assert yieldstar.run_until_idle() == 1
    execution = get_execution(execution_id)
    assert (execution.status, execution.result) == ("completed", [None, None])


def test_a_woken_run_that_waits_again_keeps_its_timer(db: None, yieldstar: YieldstarHelper) -> None:
    """A ``take_any`` woken by changes that match none of its choices waits again with the
    timer it has (one intent, still due at the timeout), instead of writing another per
    run; the timeout then fires as before."""
    execution_id = start_workflow(answer_within_an_hour, "box-k")
    yieldstar.run_until_idle()
    client = get_store_client()
    for _ in range(3):
        client.update_store(
            workflows.relay_box, "box-k", updater=lambda d: d["items"].append("noise")
        )
        assert yieldstar.run_until_idle() == 1
    timers = WakeIntent.objects.filter(execution_id=execution_id, reason="take_any")
    assert timers.count() == 1
    assert timers.get().delivered_at is None
    yieldstar.advance_time(3600)
    assert yieldstar.run_until_idle() == 1
    assert get_execution(execution_id).result == [None, None]


def test_a_leased_claim_expires_by_the_clock(db: None, yieldstar: YieldstarHelper) -> None:
    """A leased take's expiry reads the timers' clock, and ``run_until_idle`` hands back
    what expired, as the relay does (before, the lease kept wall-clock time and only the
    relay swept it: a test could not see it expire)."""
    execution_id = start_workflow(hold_and_stall, "box-l")
    yieldstar.run_until_idle()
    box = get_store_client()
    assert box.get_store(workflows.leased_box, "box-l").state["items"] == []
    yieldstar.advance_time(59)
    yieldstar.run_until_idle()
    assert box.get_store(workflows.leased_box, "box-l").state["items"] == []
    yieldstar.advance_time(1)
    yieldstar.run_until_idle()
    assert box.get_store(workflows.leased_box, "box-l").state["items"] == ["job"]
    assert ClaimLeaseRecord.objects.get(execution_id=execution_id).state == "expired"
    yieldstar.advance_time(3600)
    yieldstar.run_until_idle()
    execution = get_execution(execution_id)
    assert (execution.status, execution.result) == ("completed", False)


def test_run_until_idle_runs_what_runs_wake(db: None, yieldstar: YieldstarHelper) -> None:
    """A run's store update wakes another execution; both finish in one call."""
    waiting = start_workflow(consumer, "box-1")
    putting = start_workflow(producer, "box-1")
    assert yieldstar.run_until_idle() == 3  # consumer waits, producer puts, consumer takes
    assert get_execution(putting).result == "put"
    assert get_execution(waiting).result == "item"
    assert yieldstar.run_until_idle() == 0


def test_run_until_idle_gives_up_after_its_timeout(db: None, yieldstar: YieldstarHelper) -> None:
    execution_id = start_workflow(restless)
    with pytest.raises(TimeoutError, match=execution_id):
        yieldstar.run_until_idle(timeout=0.2)


def test_run_until_idle_refuses_a_timeout_that_is_not_a_number_of_seconds(
    db: None, yieldstar: YieldstarHelper
) -> None:
    """A ``timeout`` that is not a number, negative or NaN is a typed error naming it, and
    nothing runs. Before, ``None`` raised an unrelated ``TypeError`` (``float + NoneType``),
    and a negative or NaN one was taken: NaN never ran out, so a workflow that never
    settles hung the test."""
    execution_id = start_workflow(producer, "box-timeout")
    for wrong in (None, "10", True):
        with pytest.raises(TypeError, match="timeout"):
            yieldstar.run_until_idle(timeout=wrong)  # type: ignore[arg-type]
    for bad in (-1, -0.5, math.nan):
        with pytest.raises(ValueError, match="timeout"):
            yieldstar.run_until_idle(timeout=bad)
    assert get_execution(execution_id).status == "pending"
    assert yieldstar.run_until_idle(timeout=math.inf) == 1


#: Rounds of ``ping_pong``: far more than either time limit below lets run (a few hundred
#: runs), so a limit that holds stops it with rounds to go.
ENDLESS = 150


def test_run_until_idle_gives_up_on_executions_waking_each_other_inline(
    transactional_db: None, yieldstar: YieldstarHelper
) -> None:
    """``TransactionTestCase`` mode: two executions that keep waking each other through
    the inline backend never let ``run_until_idle`` go idle, and it raises after its
    timeout. Before, it never looked at the time while the inline backend ran what each
    run woke: it ran them all (forever, had they been endless)."""
    with override_settings(YIELDSTAR={"WAKE_BACKEND": "tests.testing.workflows.deliver_nothing"}):
        first = start_workflow(ping_pong, "ping", "pong", ENDLESS)
        second = start_workflow(ping_pong, "pong", "ping", ENDLESS)
        get_store_client().update_store(
            workflows.relay_box, "ping", updater=lambda d: d["items"].append("ball")
        )
    with pytest.raises(TimeoutError, match="still due") as caught:
        yieldstar.run_until_idle(timeout=0.5)
    assert first in str(caught.value) or second in str(caught.value)
    assert not get_execution(first).is_finished
    assert not get_execution(second).is_finished


def test_the_inline_backend_gives_up_on_executions_waking_each_other(
    transactional_db: None, yieldstar: YieldstarHelper, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write that wakes executions that keep waking each other returns once the inline
    backend has run them for ``INLINE_TIMEOUT`` seconds; what is still due stays due, and
    ``run_until_idle`` raises. Before, the write ran them all (forever, had they been
    endless): a test hung at its first write."""
    monkeypatch.setattr(runner, "INLINE_TIMEOUT", 0.5, raising=False)
    first = start_workflow(ping_pong, "ping", "pong", ENDLESS)
    second = start_workflow(ping_pong, "pong", "ping", ENDLESS)
    get_store_client().update_store(
        workflows.relay_box, "ping", updater=lambda d: d["items"].append("ball")
    )
    assert not get_execution(first).is_finished
    assert not get_execution(second).is_finished
    with pytest.raises(TimeoutError, match="still due"):
        yieldstar.run_until_idle(timeout=0.5)


def test_run_until_idle_needs_no_inline_backend(db: None) -> None:
    """Whatever WAKE_BACKEND is, it runs executions in this process."""
    execution_id = start_workflow(producer, "box-2")
    assert run_until_idle() == 1
    assert get_execution(execution_id).status == "completed"
    assert not WakeIntent.objects.filter(execution_id=execution_id, delivered_at=None).exists()


def test_inline_runs_a_woken_execution_after_its_own_run(
    transactional_db: None, yieldstar: YieldstarHelper
) -> None:
    """In autocommit, each commit runs what it woke: no run_until_idle needed."""
    waiting = start_workflow(consumer, "box-3")
    assert get_execution(waiting).status == "waiting"
    start_workflow(producer, "box-3")
    assert get_execution(waiting).result == "item"
    assert not WakeIntent.objects.filter(delivered_at=None, available_at__lte=clock.now()).exists()


# -- the fixture, the mixin, the plugin ------------------------------------------------


def test_the_plugin_is_registered_through_its_entry_point(request: pytest.FixtureRequest) -> None:
    points = importlib.metadata.entry_points(group="pytest11")
    assert any(p.value == "yieldstar_django.testing.pytest_plugin" for p in points)
    assert request.config.pluginmanager.get_plugin("yieldstar_django") is not None


def test_the_fixture_sets_the_inline_backend(yieldstar: YieldstarHelper) -> None:
    assert yieldstar_settings.WAKE_BACKEND == INLINE
    assert settings.YIELDSTAR["WAKE_BACKEND"] == INLINE


class MixinCleanupTests(YieldstarTestMixin, TestCase):
    def test_settings_and_clock_are_restored(self) -> None:
        self.assertEqual(yieldstar_settings.WAKE_BACKEND, INLINE)
        self.advance_time(60)
        self.doCleanups()
        self.assertEqual(clock.offset(), timedelta(0))
        self.assertNotEqual(yieldstar_settings.WAKE_BACKEND, INLINE)


# -- the guard ------------------------------------------------------------------------


def test_the_celery_backend_refuses_to_publish_during_tests(project_app: Celery) -> None:
    assert in_test_environment()
    with pytest.raises(BrokerInTestsError) as caught:
        refuse_in_tests(project_app)
    assert "redis://user:**@127.0.0.1:1/0" in str(caught.value)
    assert "s3cret" not in str(caught.value)
    with pytest.raises(BrokerInTestsError, match="PUBLISH_IN_TESTS"):
        celery_backend([Wake("never-published", "wf")])
    with override_settings(YIELDSTAR={"PUBLISH_IN_TESTS": True}):
        refuse_in_tests(project_app)  # allowed: returns


def test_a_refused_wake_stays_undelivered(transactional_db: None, project_app: Celery) -> None:
    """With the default backend, a start's wake is refused and left for the relay."""
    assert yieldstar_settings.WAKE_BACKEND == "yieldstar_django.wakes.celery_backend"
    execution_id = start_workflow(producer, "box-4")
    intent = WakeIntent.objects.get(execution_id=execution_id)
    assert intent.delivered_at is None
    assert "BrokerInTestsError" in intent.last_error
    assert get_execution(execution_id).status == "pending"


def test_the_report_header_names_the_trap() -> None:
    header = pytest_report_header(None)  # type: ignore[arg-type]
    assert header is not None and "BrokerInTestsError" in header
    with override_settings(YIELDSTAR={"WAKE_BACKEND": INLINE}):
        assert pytest_report_header(None) is None  # type: ignore[arg-type]


def test_store_updates_in_a_test_transaction_wake_through_run_until_idle(db: None) -> None:
    """``TestCase`` mode: the update's wake is held by an on_commit hook that never fires."""
    waiting = start_workflow(consumer, "box-5")
    run_until_idle()
    get_store_client().update_store(
        workflows.relay_box, "box-5", updater=lambda d: d["items"].append("x")
    )
    assert get_execution(waiting).status == "waiting"
    assert run_until_idle() == 1
    assert get_execution(waiting).result == "x"


def test_the_relay_reads_the_same_clock(db: None, yieldstar: YieldstarHelper) -> None:
    """A production relay round delivers a timer made due by advance_time."""
    execution_id = start_workflow(remind_tomorrow, "order-9")
    yieldstar.run_until_idle()
    assert relay_once() == 0
    yieldstar.advance_time(86_400)
    assert relay_once() == 1  # the inline backend runs it
    assert get_execution(execution_id).status == "completed"


def test_run_until_idle_runs_a_committed_wake_that_its_backend_refused(
    transactional_db: None, project_app: Celery
) -> None:
    """``TransactionTestCase`` mode with the default backend: the start's wake committed,
    was refused (no broker in tests) and waits for the relay; run_until_idle runs it."""
    execution_id = start_workflow(producer, "box-6")
    assert get_execution(execution_id).status == "pending"
    assert run_until_idle() == 1
    assert get_execution(execution_id).status == "completed"


def _unregistered(step: Any) -> Any:  # called as every workflow is: fn(step)
    yield from ()
    return "never run here"


def test_run_until_idle_names_executions_whose_workflow_is_not_registered(
    db: None, yieldstar: YieldstarHelper
) -> None:
    """An execution whose workflow this process does not know cannot run here: each run
    is deferred (``run_execution`` answers ``deferred`` and sets a timer). run_until_idle
    runs what it can, then raises ``UnregisteredWorkflowError`` naming the execution and
    its workflow. Failed before: it counted the deferral as a run and returned as if
    idle (``1`` here for a run that ran nothing), leaving the execution pending."""
    name = "ys-testing-not-registered-here"
    orphan = start_workflow(workflow(name)(_unregistered))
    unregister_workflow(name)
    fine = start_workflow(producer, "box-7")
    with pytest.raises(LookupError, match=name) as caught:
        yieldstar.run_until_idle()
    assert isinstance(caught.value, testing.UnregisteredWorkflowError)
    assert caught.value.executions == {orphan: name}
    assert orphan in str(caught.value)
    assert get_execution(fine).status == "completed"
    assert not get_execution(orphan).is_finished
    with pytest.raises(testing.UnregisteredWorkflowError, match=orphan):  # still stranded
        yieldstar.run_until_idle()


def test_run_until_idle_cuts_off_a_run_that_never_suspends_at_a_step(
    transactional_db: None, yieldstar: YieldstarHelper
) -> None:
    """A run that goes on from step to step without suspending is cut off at a step once
    the timeout has passed (everything it recorded stays recorded; the execution is not
    finished), and run_until_idle raises ``TimeoutError`` naming it. Failed before: the
    timeout was looked at only between runs, so it waited for the run to end (here after
    a minute; never, had it been endless) and returned."""
    with override_settings(YIELDSTAR={"WAKE_BACKEND": "tests.testing.workflows.deliver_nothing"}):
        execution_id = start_workflow(busy_until, time.time() + HANG_SECONDS)
    with pytest.raises(TimeoutError, match=execution_id):
        yieldstar.run_until_idle(timeout=0.5)
    execution = get_execution(execution_id)
    assert not execution.is_finished  # cut off long before the run would have ended

    assert execution.steps.filter(status="completed").exists()  # what it recorded stays
    assert execution.lease_owner == ""  # let go, and due again at once:
    assert WakeIntent.objects.filter(execution_id=execution_id, delivered_at=None).exists()
