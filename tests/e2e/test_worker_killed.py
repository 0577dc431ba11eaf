"""A worker SIGKILLed in the middle of a step: a new worker finishes the execution once
the dead worker's lease expires (the takeover timer, delivered by the relay)."""

from __future__ import annotations

from pathlib import Path

import pytest

from yieldstar_django.models import Execution
from yieldstar_django.runtime import start_workflow

from .conftest import E2E_MARKS, Env, attempts, kill_mid_step_and_rescue, wait_until

pytestmark = [*E2E_MARKS, pytest.mark.django_db(transaction=True)]


def test_sigkilled_worker_mid_step_execution_completes_on_a_new_worker(
    e2e: Env, tmp_path: Path
) -> None:
    e2e.start_relay()
    first = e2e.start_worker("doomed")
    eid = start_workflow("e2e.slow_step", str(tmp_path))
    wait_until("the step to start", lambda: attempts(tmp_path) != [])
    held = Execution.objects.get(pk=eid)
    assert held.status == "running" and held.lease_owner != ""
    kill_mid_step_and_rescue(e2e, first, eid, tmp_path)
    e2e.stop_all()
