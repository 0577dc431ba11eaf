"""Workflows resumed by a real Celery worker process, over PostgreSQL, with Redis and with
RabbitMQ as the broker."""

from __future__ import annotations

import subprocess
import sys
import uuid
from datetime import datetime
from typing import Any

import pytest

from tests.e2e.workflows import jobs, push
from yieldstar_django import get_store_client
from yieldstar_django.models import Execution, ExecutionStep, WakeIntent
from yieldstar_django.runtime import get_execution, start_workflow

from .conftest import E2E_MARKS, ROOT, Env, wait_until

pytestmark = [*E2E_MARKS, pytest.mark.django_db(transaction=True)]


def _status(execution_id: str) -> str:
    return Execution.objects.get(pk=execution_id).status


def test_take_waits_then_completes_after_another_process_pushes(services: Env) -> None:
    store_id = f"one-{uuid.uuid4().hex[:8]}"
    eid = start_workflow("e2e.take_one", store_id)
    wait_until("the take to wait", lambda: _status(eid) == "waiting")
    subprocess.run(
        [sys.executable, "-m", "tests.e2e.push", store_id, "hello"],
        cwd=ROOT,
        env=services.environ(),
        check=True,
    )
    wait_until("the execution to complete", lambda: get_execution(eid).is_finished)
    execution = get_execution(eid)
    assert execution.status == "completed", execution.error
    assert execution.result == "hello"
    take = ExecutionStep.objects.get(execution_id=eid, step_key="0")
    assert take.kind == "take" and take.status == "completed"
    assert get_store_client().waiters(jobs, store_id) == []


def test_sleep_completes_after_its_time_and_not_before(services: Env) -> None:
    eid = start_workflow("e2e.sleeper", 2.0)
    wait_until("the execution to complete", lambda: get_execution(eid).is_finished, 60)
    execution = get_execution(eid)
    assert execution.status == "completed", execution.error
    before, after = (datetime.fromisoformat(t) for t in execution.result)
    sleep = ExecutionStep.objects.get(execution_id=eid, step_key="1")
    assert sleep.kind == "sleep" and sleep.wake_at is not None and sleep.recorded_at is not None
    # The timer was set for 2 s after the sleep started, and the sleep ended at or after it.
    assert (sleep.wake_at - sleep.created_at).total_seconds() >= 2.0
    assert sleep.recorded_at >= sleep.wake_at
    assert (after - before).total_seconds() >= 2.0
    # Every step was recorded in the order the workflow made them.
    steps = list(ExecutionStep.objects.filter(execution_id=eid).order_by("position"))
    assert [s.kind for s in steps] == ["run", "sleep", "run"]
    assert steps[0].recorded_at <= sleep.created_at <= sleep.recorded_at <= steps[2].recorded_at


def test_duplicate_and_concurrent_resumes_are_harmless(services: Env) -> None:
    store_id = f"dup-{uuid.uuid4().hex[:8]}"
    eid = start_workflow("e2e.take_one", store_id)
    wait_until("the take to wait", lambda: _status(eid) == "waiting")
    push(store_id, ["only"])
    storm = [  # duplicate deliveries
        services.app.send_task("yieldstar_django.resume_execution", args=[eid]).id
        for _ in range(20)
    ]
    wait_until("the execution to complete", lambda: get_execution(eid).is_finished)
    # Let the storm end before the test does: a resume still running when the test
    # database is flushed holds locks the flush's TRUNCATE waits for (a deadlock).
    wait_until("the duplicate deliveries to be handled", lambda: services.handled(storm))
    assert get_execution(eid).result == "only"
    assert ExecutionStep.objects.filter(execution_id=eid).count() == 1
    items: Any = get_store_client().get_store(jobs, store_id).state["items"]
    assert items == [{"value": "only", "claimed_by": eid}]


def test_fifty_items_in_one_commit_resume_fifty_takers_about_once(services: Env) -> None:
    """No thundering herd: 50 takers and 50 items in one commit cost at most 2N resumes
    and 2N wake deliveries (each claim used to wake every taker still registered again:
    the runs coalesced, but every wake was a task on the broker)."""
    store_id = f"herd-{uuid.uuid4().hex[:8]}"
    ids = [start_workflow("e2e.take_one", store_id) for _ in range(50)]
    executions = Execution.objects.filter(pk__in=ids)
    wait_until("all 50 to wait", lambda: executions.filter(status="waiting").count() == 50, 120)
    push(store_id, [f"item-{n}" for n in range(50)])
    wait_until("all 50 to finish", lambda: executions.filter(status="completed").count() == 50)
    results = sorted(get_execution(eid).result for eid in ids)
    assert results == sorted(f"item-{n}" for n in range(50)), "each item taken once"
    resumes = sum(executions.values_list("runs", flat=True)) - 50
    wakes = WakeIntent.objects.filter(execution_id__in=ids, reason="store").count()
    # Each wake is a delivery (a Celery task); before, 1,275 (N(N+1)/2) for 50 resumes.
    assert resumes <= 100 and wakes <= 100, (resumes, wakes)


def test_fifty_waiters_fifty_items_each_claimed_exactly_once(services: Env) -> None:
    store_id = f"fifty-{uuid.uuid4().hex[:8]}"
    ids = [start_workflow("e2e.take_one", store_id) for _ in range(50)]
    wait_until(
        "all 50 to wait",
        lambda: Execution.objects.filter(pk__in=ids, status="waiting").count() == 50,
        120,
    )
    for n in range(50):
        push(store_id, [f"item-{n}"])
    wait_until(
        "all 50 to finish",
        lambda: Execution.objects.filter(pk__in=ids, status="completed").count() == 50,
        180,
    )
    results = {eid: get_execution(eid).result for eid in ids}
    assert sorted(results.values()) == sorted(f"item-{n}" for n in range(50))
    state = get_store_client().get_store(jobs, store_id).state
    claims = {item["value"]: item["claimed_by"] for item in state["items"]}
    assert len(state["items"]) == 50
    assert {value: eid for eid, value in results.items()} == claims
    assert get_store_client().waiters(jobs, store_id) == []
