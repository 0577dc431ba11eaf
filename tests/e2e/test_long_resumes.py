"""A resume that outlasts Redis's ``visibility_timeout``: Redis hands its message (still
unacknowledged, the task is ``acks_late``) to a worker again while the run goes on. The
second delivery finds the lease held, flags a wake and returns ``busy``; the step runs
once and the execution completes (``docs/howto/run-workers.md``, delivery guarantees)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from yieldstar_django.runtime import get_execution, start_workflow

from .conftest import E2E_MARKS, Env, attempts, wait_until

pytestmark = [*E2E_MARKS, pytest.mark.django_db(transaction=True)]

#: A visibility timeout of 2 s, and Redis's unacknowledged messages looked at every 0.5 s
#: (Celery's defaults: an hour, and at most every tenth minute).
SHORT_VISIBILITY = {
    "visibility_timeout": 2,
    "unacked_restore_interval": 0.5,
    "unacked_restore_throttle": 1,
}


def test_a_resume_longer_than_the_visibility_timeout_runs_its_step_once(
    e2e: Env, tmp_path: Path
) -> None:
    if e2e.broker.kind != "redis":
        pytest.skip("the visibility timeout is Redis's")
    worker = e2e.start_worker(
        "long", env={"YIELDSTAR_E2E_TRANSPORT_OPTIONS": json.dumps(SHORT_VISIBILITY)}
    )
    execution_id = start_workflow("e2e.paused_step", str(tmp_path))
    wait_until("the step to start", lambda: attempts(tmp_path) != [])
    [task_id] = re.findall(r"resume_execution\[([0-9a-f-]+)\] received", worker.output())
    wait_until(
        "Redis to deliver the running resume's message again",
        lambda: f"resume_execution[{task_id}] succeeded in" in worker.output(),
        60,
    )
    assert re.search(
        rf"resume_execution\[{task_id}\] succeeded in [0-9.]+s: 'busy'", worker.output()
    )
    (tmp_path / "release").touch()
    wait_until("the execution to finish", lambda: get_execution(execution_id).is_finished, 60)
    execution = get_execution(execution_id)
    assert execution.status == "completed", execution.error
    assert len(attempts(tmp_path)) == 1
    e2e.stop_all()
