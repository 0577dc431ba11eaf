"""Liveness after a worker dies, without Celery: a renewed lease moves its
takeover timer, and a wake the broker accepted but no run acknowledged (a killed worker's
prefetched message) is delivered again by the relay. Real database; the wake backend only
records, so a "dead worker" is a wake handed over and never run. The e2e versions with
real workers and brokers are in tests/e2e/test_recovery.py."""

from __future__ import annotations

import time
from typing import Any

from django.test import override_settings
from django.utils import timezone

from yieldstar_django.models import Execution, WakeIntent
from yieldstar_django.runtime import Step, get_execution, start_workflow
from yieldstar_django.runtime.executions import ResumeResult, run_execution
from yieldstar_django.runtime.leases import acquire_lease
from yieldstar_django.wakes import relay_once

from .conftest import WAKES, Runtime

RECORD = "tests.runtime.conftest.record_wakes"


def _woken(execution_id: str) -> bool:
    return any(w.execution_id == execution_id for w in WAKES)


def test_a_lease_renewed_then_abandoned_is_taken_over_after_the_renewed_expiry(
    rt: Runtime,
) -> None:
    @rt.workflow
    def wf(step: Step) -> Any:
        return (yield from step.run(lambda: "done"))

    eid = start_workflow(wf)
    WAKES.clear()
    with override_settings(YIELDSTAR={"WAKE_BACKEND": RECORD, "LEASE_SECONDS": 0.4}):
        lease = acquire_lease(eid)
        assert lease is not None
        # A heartbeat renews the lease for 1.2 s (well past the first expiry); wakes that
        # arrive meanwhile find it held and only flag the holder.
        for _ in range(6):
            time.sleep(0.2)
            assert lease.renew()
            relay_once()
            for wake in list(WAKES):
                assert run_execution(wake.execution_id) == ResumeResult.BUSY
            WAKES.clear()
        # The holder now "dies": it never renews again and never runs the flagged wake.
        deadline = time.monotonic() + 10
        while not _woken(eid) and time.monotonic() < deadline:
            time.sleep(0.1)
            relay_once()
        assert _woken(eid), "no takeover timer fired after the renewed lease expired"
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

    with override_settings(YIELDSTAR={"WAKE_BACKEND": RECORD, "RELAY_DELAY": 0.3}):
        eid = start_workflow(wf)
        assert _woken(eid)  # handed over on commit, marked delivered...
        WAKES.clear()  # ...and lost with the worker that prefetched it
        relay_once()
        assert not _woken(eid)  # too early: the worker may be slow, not dead
        time.sleep(0.4)
        relay_once()
        assert _woken(eid), "the stranded execution was not re-driven"
        WAKES.clear()
        relay_once()
        assert not _woken(eid)  # once per RELAY_DELAY, not every round
        assert run_execution(eid) == ResumeResult.FINISHED
        time.sleep(0.4)
        relay_once()
        assert not _woken(eid)  # finished: nothing to re-drive
    assert get_execution(eid).result == "ran"
