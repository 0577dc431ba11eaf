"""Recovery after a worker dies or pauses (issue 8), on Redis and RabbitMQ: a SIGKILLed
worker's execution resumes within seconds on a live worker; a SIGSTOPped worker that
comes back after another took over records nothing."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from yieldstar_django.models import ExecutionStep
from yieldstar_django.runtime import get_execution, start_workflow

from .conftest import E2E_MARKS, Env, wait_until
from .recovery import measure_recovery
from .timing import E2E_YIELDSTAR

pytestmark = [*E2E_MARKS, pytest.mark.django_db(transaction=True)]

#: Lease, takeover margin, relay poll, and generous slack for a loaded machine.
BOUND = E2E_YIELDSTAR["LEASE_SECONDS"] + 0.5 + E2E_YIELDSTAR["RELAY_INTERVAL"] + 10


def test_a_sigkilled_workers_execution_resumes_within_the_lease(e2e: Env, tmp_path: Path) -> None:
    e2e.start_relay()
    kills = int(os.environ.get("YIELDSTAR_RECOVERY_KILLS", "3"))
    # Every other kill comes after the lease was renewed (its first takeover timer has
    # fired while the lease was valid): the renewal must have moved the timer.
    holds = (0.0, E2E_YIELDSTAR["LEASE_SECONDS"] + 1.0)
    recovery = measure_recovery(e2e, tmp_path, kills=kills, holds=holds)
    print(f"\nrecovery on {e2e.broker.kind}: {recovery.summary()}")
    assert max(recovery.seconds) < BOUND, recovery.summary()
    e2e.stop_all()


def test_wakes_prefetched_by_a_killed_worker_are_not_stranded(e2e: Env, tmp_path: Path) -> None:
    e2e.start_relay()
    doomed = e2e.start_worker("doomed")
    slow = []
    for i in range(2):  # both pool processes busy...
        marker = tmp_path / f"slow-{i}"
        marker.mkdir()
        slow.append(start_workflow("e2e.slow_step", str(marker)))
        wait_until("the step to start", lambda m=marker: (m / "attempts").exists())
    # ...so these wait in the doomed worker's prefetch (Redis: its unacked hash).
    quick = [start_workflow("e2e.sleeper", 0.0) for _ in range(4)]
    time.sleep(2)
    assert not any(get_execution(eid).is_finished for eid in quick)
    doomed.kill()
    e2e.start_worker("rescuer")
    for eid in [*slow, *quick]:
        wait_until("every execution to complete", lambda e=eid: get_execution(e).is_finished, 60)
        assert get_execution(eid).status == "completed", get_execution(eid).error
    e2e.stop_all()


def test_a_paused_worker_that_comes_back_records_nothing(e2e: Env, tmp_path: Path) -> None:
    e2e.start_relay()
    paused = e2e.start_worker("paused")
    eid = start_workflow("e2e.paused_step", str(tmp_path))
    attempts = tmp_path / "attempts"
    wait_until("the step to start", lambda: attempts.exists() and attempts.read_text() != "")
    os.killpg(paused.popen.pid, signal.SIGSTOP)
    try:
        e2e.start_worker("successor")
        wait_until("the successor to finish", lambda: get_execution(eid).is_finished, 60)
    finally:
        os.killpg(paused.popen.pid, signal.SIGCONT)
    # The paused step wakes up, returns "first" and tries to record it: fenced.
    time.sleep(8)
    execution = get_execution(eid)
    assert execution.status == "completed", execution.error
    assert execution.result == "later"
    steps = ExecutionStep.objects.filter(execution_id=eid)
    assert [(s.step_key, s.value) for s in steps] == [("0", "later")]
    assert len(attempts.read_text().splitlines()) == 2
    e2e.stop_all()
