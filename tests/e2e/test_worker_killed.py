"""A worker SIGKILLed in the middle of a step: a new worker finishes the execution once
the dead worker's lease expires (the takeover timer, delivered by the relay)."""

from __future__ import annotations

from pathlib import Path

import pytest

from yieldstar_django.models import Execution, ExecutionStep
from yieldstar_django.runtime import get_execution, start_workflow

from .conftest import E2E_MARKS, Env, wait_until

pytestmark = [*E2E_MARKS, pytest.mark.django_db(transaction=True)]


def test_sigkilled_worker_mid_step_execution_completes_on_a_new_worker(
    e2e: Env, tmp_path: Path
) -> None:
    e2e.start_relay()
    first = e2e.start_worker("doomed")
    eid = start_workflow("e2e.slow_step", str(tmp_path))
    attempts = tmp_path / "attempts"
    wait_until("the step to start", lambda: attempts.exists() and attempts.read_text() != "")
    held = Execution.objects.get(pk=eid)
    assert held.status == "running" and held.lease_owner != ""
    first.kill()

    e2e.start_worker("rescuer")
    wait_until("the execution to complete", lambda: get_execution(eid).is_finished, 90)
    execution = get_execution(eid)
    assert execution.status == "completed", execution.error
    # The step ran again in the new worker (at least once), and was recorded once.
    assert execution.result[0] == 2
    assert len(attempts.read_text().splitlines()) == 2
    assert ExecutionStep.objects.filter(execution_id=eid, step_key="0").count() == 1
    assert execution.runs >= 2
    e2e.stop_all()
