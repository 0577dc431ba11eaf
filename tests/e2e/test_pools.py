"""Workers of each Celery pool (prefork with four processes, four threads, solo) on one
database: executions that wait, sleep and wake each other from inside a worker complete,
each item claimed once; and a warm shutdown (SIGTERM to the worker's main process, as
``docs/howto/run-workers.md`` says to stop one) in the middle of a step lets the run
finish, the step run once, before the worker exits."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

import pytest

from yieldstar_django.models import Execution
from yieldstar_django.runtime import get_execution, start_workflow

from .conftest import E2E_MARKS, Env, attempts, wait_until

pytestmark = [*E2E_MARKS, pytest.mark.django_db(transaction=True)]

#: Executions of each kind per test.
N = 6


@pytest.mark.parametrize("pool", ["prefork", "threads", "solo"])
def test_each_pool_runs_executions_and_stops_warmly_mid_step(
    e2e: Env, pool: str, tmp_path: Path
) -> None:
    e2e.start_relay()
    worker = e2e.start_worker(pool, pool=pool, concurrency=1 if pool == "solo" else 4)
    store_id = f"{pool}-{uuid.uuid4().hex[:8]}"
    takers = [start_workflow("e2e.take_one", store_id) for _ in range(N)]
    sleepers = [start_workflow("e2e.sleeper", 0.5) for _ in range(N)]
    pushers = [start_workflow("e2e.pusher", store_id, [n]) for n in range(N)]
    everything = Execution.objects.filter(pk__in=takers + sleepers + pushers)
    wait_until(
        "every execution to complete",
        lambda: everything.filter(status="completed").count() == 3 * N,
        120,
    )
    assert sorted(get_execution(eid).result for eid in takers) == list(range(N))

    execution_id = start_workflow("e2e.paused_step", str(tmp_path))
    wait_until("the step to start", lambda: attempts(tmp_path) != [])
    worker.popen.send_signal(signal.SIGTERM)  # the main process only: a warm shutdown
    wait_until("the worker to begin its warm shutdown", lambda: "Warm shutdown" in worker.output())
    assert worker.popen.poll() is None, "the worker waits for the run"
    (tmp_path / "release").touch()
    wait_until("the worker to exit", lambda: worker.popen.poll() is not None, 60)
    assert worker.popen.returncode == 0, worker.output()[-3000:]
    execution = get_execution(execution_id)
    assert execution.status == "completed", execution.error
    assert len(attempts(tmp_path)) == 1
    e2e.stop_all()


def test_sigterm_to_every_process_of_a_prefork_worker_is_a_kill_mid_step(
    e2e: Env, tmp_path: Path
) -> None:
    """SIGTERM sent to the pool processes too (systemd's default ``KillMode=control-group``,
    ``kill`` of the process group) ends each of them at once, mid-run: Celery restores
    SIGTERM's default action in its pool processes. The execution is taken over when its
    lease expires and the interrupted step runs again, as after a SIGKILL."""
    e2e.start_relay()
    worker = e2e.start_worker("grouped")
    execution_id = start_workflow("e2e.paused_step", str(tmp_path))
    wait_until("the step to start", lambda: attempts(tmp_path) != [])
    worker.signal(signal.SIGTERM)
    wait_until("the worker to exit", lambda: worker.popen.poll() is not None, 60)
    e2e.start_worker("rescuer")
    wait_until("the execution to complete", lambda: get_execution(execution_id).is_finished, 90)
    execution = get_execution(execution_id)
    assert execution.status == "completed", execution.error
    assert len(attempts(tmp_path)) == 2
    e2e.stop_all()


def test_a_cold_shutdown_of_a_solo_worker_mid_step_fails_nothing(e2e: Env, tmp_path: Path) -> None:
    """A cold shutdown (SIGQUIT; a second Ctrl+C; SIGTERM under ``REMAP_SIGTERM=SIGQUIT``)
    cancels the tasks in progress from Celery's signal handler, which the solo pool runs
    in the thread of the task: what it raises there (Celery's solo pool cannot cancel a
    task: ``NotImplementedError``) surfaces in the step. That is the worker stopping, not
    the step failing: nothing is recorded, and the execution is taken over once its
    lease expires, the interrupted step run again."""
    e2e.start_relay()
    worker = e2e.start_worker("solo", pool="solo", concurrency=1)
    execution_id = start_workflow("e2e.paused_step", str(tmp_path))
    wait_until("the step to start", lambda: attempts(tmp_path) != [])
    worker.popen.send_signal(signal.SIGQUIT)
    wait_until("the worker to exit", lambda: worker.popen.poll() is not None, 60)
    e2e.start_worker("rescuer")
    wait_until("the execution to finish", lambda: get_execution(execution_id).is_finished, 90)
    execution = get_execution(execution_id)
    assert execution.status == "completed", execution.error
    assert len(attempts(tmp_path)) == 2
    e2e.stop_all()
