"""Liveness after a worker dies, without Celery: a renewed lease moves its
takeover timer, and a wake the broker accepted but no run acknowledged (a killed worker's
prefetched message) is delivered again by the relay. Real database; the wake backend only
records, so a "dead worker" is a wake handed over and never run. The e2e versions with
real workers and brokers are in tests/e2e/test_recovery.py."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

from tests.polling import wait_until
from yieldstar_django import clock
from yieldstar_django.models import Execution, WakeIntent
from yieldstar_django.runtime import Step, get_execution, start_workflow
from yieldstar_django.runtime.executions import ResumeResult, run_execution
from yieldstar_django.runtime.leases import acquire_lease
from yieldstar_django.wakes import relay_once

from .conftest import WAKES, Runtime

RECORD = "tests.runtime.conftest.record_wakes"
#: The lease of the takeover test, in seconds.
LEASE = 1.0


def _woken(execution_id: str) -> bool:
    return any(w.execution_id == execution_id for w in WAKES)


@pytest.mark.slow
def test_a_lease_renewed_then_abandoned_is_taken_over_after_the_renewed_expiry(
    rt: Runtime,
) -> None:
    @rt.workflow
    def wf(step: Step) -> Any:
        return (yield from step.run(lambda: "done"))

    eid = start_workflow(wf)
    WAKES.clear()
    with override_settings(YIELDSTAR={"WAKE_BACKEND": RECORD, "LEASE_SECONDS": LEASE}):
        lease = acquire_lease(eid)
        assert lease is not None
        first_expiry = lease.expires_at
        # A heartbeat renews the lease until well past its first expiry; wakes that arrive
        # meanwhile find it held and only flag the holder. (A renewal comes every fifth of
        # the lease, so a pause of most of a lease on a loaded machine loses nothing.)
        while timezone.now() < first_expiry + timedelta(seconds=LEASE / 2):
            time.sleep(LEASE / 5)
            assert lease.renew()
            relay_once()
            for wake in list(WAKES):
                assert run_execution(wake.execution_id) == ResumeResult.BUSY
            WAKES.clear()

        # The holder now "dies": it never renews again and never runs the flagged wake.
        def taken_over() -> bool:
            relay_once()
            return _woken(eid)

        wait_until("a takeover timer to fire after the renewed lease expired", taken_over)
        assert Execution.objects.get(pk=eid).lease_expires_at < timezone.now()
        assert run_execution(eid) == ResumeResult.FINISHED
    assert get_execution(eid).result == "done"


def test_renew_rearms_a_takeover_timer_that_already_fired(rt: Runtime) -> None:
    @rt.workflow
    def wf(step: Step) -> Any:
        return (yield from step.run(lambda: 1))

    eid = start_workflow(wf)
    lease = acquire_lease(eid)
    assert lease is not None and lease.timer is not None
    WakeIntent.objects.filter(pk=lease.timer).update(delivered_at=timezone.now())
    assert lease.renew()
    timer = WakeIntent.objects.get(pk=lease.timer)
    assert timer.delivered_at is None
    assert timer.available_at > lease.expires_at


def test_a_delivered_wake_that_moved_nothing_is_redriven(rt: Runtime) -> None:
    @rt.workflow
    def wf(step: Step) -> Any:
        return (yield from step.run(lambda: "ran"))

    # The relay's due times read the timers' clock: moved ahead here, not waited for.
    delay = 600.0
    try:
        with override_settings(YIELDSTAR={"WAKE_BACKEND": RECORD, "RELAY_DELAY": delay}):
            eid = start_workflow(wf)
            assert _woken(eid)  # handed over on commit, marked delivered...
            WAKES.clear()  # ...and lost with the worker that prefetched it
            relay_once()
            assert not _woken(eid)  # too early: the worker may be slow, not dead
            clock.advance(delay + 1)
            relay_once()
            assert _woken(eid), "the stranded execution was not re-driven"
            WAKES.clear()
            relay_once()
            assert not _woken(eid)  # once per RELAY_DELAY, not every round
            assert run_execution(eid) == ResumeResult.FINISHED
            clock.advance(2 * delay + 1)
            relay_once()
            assert not _woken(eid)  # finished: nothing to re-drive
    finally:
        clock.reset()
    assert get_execution(eid).result == "ran"
