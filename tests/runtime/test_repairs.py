"""``retry_execution`` and ``fork_execution`` on PostgreSQL and SQLite: what a retry runs
again and what it keeps, how a retried or forked execution is resumed (a wake intent
delivered after the commit), what a fork copies, and the typed errors of both."""

from __future__ import annotations

import itertools
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction

from tests.shared import race_workflows
from tests.shared.fixtures import WakeCollector
from tests.shared.outside import runtime_on
from yieldstar_django import (
    ExecutionConflictError,
    ExecutionStateError,
    ForkPointError,
    cancel_execution,
    fork_execution,
    get_execution,
    retry_execution,
    start_workflow,
)
from yieldstar_django.connector import get_store_client
from yieldstar_django.models import Execution, ExecutionStep, Waiter, WakeIntent
from yieldstar_django.runtime import Step, workflow
from yieldstar_django.runtime.executions import run_execution
from yieldstar_django.runtime.registry import unregister_workflow

_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


@pytest.fixture
def on(alias: str, wakes: WakeCollector) -> Iterator[str]:
    """The runtime on ``alias``, its wakes collected."""
    with runtime_on(alias):
        yield alias


def drain(wakes: WakeCollector) -> list[str]:
    """Run every execution a delivered wake names (as a worker would), until none is left;
    the results."""
    results = []
    while wakes:
        pending = list(dict.fromkeys(w.execution_id for w in wakes))
        wakes.clear()
        results += [str(run_execution(eid)) for eid in pending]
    return results


def counter(store_id: str) -> int:
    n: int = get_store_client().get_store(race_workflows.COUNTER, store_id).state["n"]
    return n


def attempts(path: Path) -> int:
    return race_workflows.read_log(str(path) + ".log").count("attempt")


def failed_repair(tmp_path: Path, wakes: WakeCollector) -> tuple[str, Path]:
    """A ``race-repair`` execution that failed at its ``fix`` step; the fix's path."""
    fix = tmp_path / unique("fix")
    execution_id = start_workflow("race-repair", unique("counter"), str(fix))
    drain(wakes)
    execution = get_execution(execution_id)
    assert execution.status == "failed", execution.error
    return execution_id, fix


def test_a_retry_runs_the_failed_step_again_and_keeps_the_others(
    on: str, tmp_path: Path, wakes: WakeCollector
) -> None:
    """The failed step's error record is deleted and the step runs again; the update
    before it replays its recorded result (the counter is incremented once). The retry
    requests the run through a wake intent delivered after its commit."""
    execution_id, fix = failed_repair(tmp_path, wakes)
    store_id = get_execution(execution_id).input["args"][0]
    before = {s.step_key: s.pk for s in ExecutionStep.objects.filter(execution_id=execution_id)}
    assert set(before) == {"inc", "fix"}
    fix.touch()
    assert retry_execution(execution_id) is True
    execution = get_execution(execution_id)
    assert (execution.status, execution.error, execution.finished_at) == ("pending", None, None)
    assert execution.retries == 1
    assert [w.execution_id for w in wakes] == [execution_id]
    intent = WakeIntent.objects.filter(execution_id=execution_id, reason="retry").get()
    assert intent.delivered_at is None  # acknowledged by the run it asks for
    assert drain(wakes) == ["finished"]
    execution = get_execution(execution_id)
    assert (execution.status, execution.result) == ("completed", [1, "fixed"])
    assert counter(store_id) == 1
    assert attempts(fix) == 2
    after = {s.step_key: s.pk for s in ExecutionStep.objects.filter(execution_id=execution_id)}
    assert after["inc"] == before["inc"]  # kept, not recorded again
    assert after["fix"] != before["fix"]


def test_a_retry_inside_a_rolled_back_transaction_changes_nothing(
    on: str, tmp_path: Path, wakes: WakeCollector
) -> None:
    execution_id, _ = failed_repair(tmp_path, wakes)
    with pytest.raises(RuntimeError, match="rolled back"), transaction.atomic(using=on):
        assert retry_execution(execution_id)
        raise RuntimeError("rolled back")
    assert get_execution(execution_id).status == "failed"
    assert ExecutionStep.objects.filter(execution_id=execution_id, step_key="fix").exists()
    assert not wakes
    assert not WakeIntent.objects.filter(execution_id=execution_id, reason="retry").exists()


def test_an_execution_that_fails_again_can_be_retried_again(
    on: str, tmp_path: Path, wakes: WakeCollector
) -> None:
    execution_id, fix = failed_repair(tmp_path, wakes)
    assert retry_execution(execution_id)
    assert drain(wakes) == ["finished"]
    assert get_execution(execution_id).status == "failed"
    fix.touch()
    assert retry_execution(execution_id)
    drain(wakes)
    execution = get_execution(execution_id)
    assert (execution.status, execution.retries, attempts(fix)) == ("completed", 2, 3)


@pytest.fixture
def waiting_workflow() -> Iterator[str]:
    """A workflow that takes an item from a counter store once ``n`` is positive."""
    name = unique("repair-wait")

    def fn(step: Step, store_id: str) -> Generator[Any, Any, int]:
        taken = yield from step.take(
            race_workflows.COUNTER,
            store_id,
            lambda state: state["n"] if state["n"] > 0 else None,
            lambda draft, selected: draft.update(n=0),
        )
        return int(taken)

    workflow(name)(fn)
    yield name
    unregister_workflow(name)


def test_a_cancelled_execution_is_retried_from_the_step_it_waited_on(
    on: str, wakes: WakeCollector, waiting_workflow: str
) -> None:
    """A cancel removed the take's waiter; the retry runs the take again, which waits
    again (a waiter registered anew) and is woken by the next change of the store."""
    store_id = unique("store")
    execution_id = start_workflow(waiting_workflow, store_id)
    drain(wakes)
    assert get_execution(execution_id).status == "waiting"
    assert cancel_execution(execution_id)
    client = get_store_client()
    assert not Waiter.objects.filter(execution_id=execution_id).exists()
    assert retry_execution(execution_id)
    assert drain(wakes) == ["suspended"]
    assert get_execution(execution_id).status == "waiting"
    assert Waiter.objects.filter(execution_id=execution_id).count() == 1
    client.update_store(race_workflows.COUNTER, store_id, updater=lambda d: d.update(n=5))
    drain(wakes)
    execution = get_execution(execution_id)
    assert (execution.status, execution.result) == ("completed", 5)


@pytest.mark.parametrize("status", ["pending", "waiting", "completed"])
def test_only_failed_or_cancelled_executions_are_retried(
    on: str, wakes: WakeCollector, waiting_workflow: str, status: str
) -> None:
    store_id = unique("store")
    execution_id = start_workflow(waiting_workflow, store_id)
    if status != "pending":
        drain(wakes)
    if status == "completed":
        get_store_client().update_store(
            race_workflows.COUNTER, store_id, updater=lambda d: d.update(n=1)
        )
        drain(wakes)
    before = Execution.objects.get(pk=execution_id)
    assert before.status == status
    intents = WakeIntent.objects.filter(execution_id=execution_id).count()
    with pytest.raises(ExecutionStateError, match=f"is {status}") as raised:
        retry_execution(execution_id)
    assert (raised.value.execution_id, raised.value.status) == (execution_id, status)
    after = Execution.objects.get(pk=execution_id)
    assert (after.status, after.retries, after.updated_at) == (status, 0, before.updated_at)
    assert WakeIntent.objects.filter(execution_id=execution_id).count() == intents


def test_retry_of_no_execution_or_of_an_id_no_table_holds(on: str) -> None:
    with pytest.raises(Execution.DoesNotExist):
        retry_execution("no-such-execution")
    with pytest.raises(TypeError, match="must be a str"):
        retry_execution(7)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="x00"):
        retry_execution("nul\x00")
    with pytest.raises(ValueError, match="longer than"):
        retry_execution("x" * 256)


# --- fork -----------------------------------------------------------------------------------


def test_a_fork_copies_the_first_steps_and_runs_the_rest_itself(
    on: str, tmp_path: Path, wakes: WakeCollector
) -> None:
    """A fork at 1 copies the recorded update (the fork does not increment the counter
    again) and runs the failed step itself, now fixed; the source is unchanged. A fork
    at 0 runs everything again under its own id: its update applies once more."""
    source_id, fix = failed_repair(tmp_path, wakes)
    store_id = get_execution(source_id).input["args"][0]
    source_before = list(ExecutionStep.objects.filter(execution_id=source_id).values())
    fix.touch()
    fork_id = fork_execution(source_id, from_step=1)
    assert fork_id != source_id
    fork = get_execution(fork_id)
    assert (fork.workflow_id, fork.input_json) == (
        "race-repair",
        get_execution(source_id).input_json,
    )
    assert (fork.forked_from, fork.fork_step, fork.status) == (source_id, 1, "pending")
    assert list(
        ExecutionStep.objects.filter(execution_id=fork_id).values_list("step_key", "status")
    ) == [("inc", "completed")]
    assert [w.execution_id for w in wakes] == [fork_id]
    assert WakeIntent.objects.filter(execution_id=fork_id, reason="fork").exists()
    assert drain(wakes) == ["finished"]
    fork = get_execution(fork_id)
    assert (fork.status, fork.result) == ("completed", [1, "fixed"])
    assert counter(store_id) == 1
    source = get_execution(source_id)
    assert source.status == "failed"
    assert list(ExecutionStep.objects.filter(execution_id=source_id).values()) == source_before

    fresh = fork_execution(source_id, from_step=0)
    assert not ExecutionStep.objects.filter(execution_id=fresh).exists()
    drain(wakes)
    assert get_execution(fresh).result == [2, "fixed"]
    assert counter(store_id) == 2


def test_a_fork_of_every_recorded_step_replays_the_recorded_error(
    on: str, tmp_path: Path, wakes: WakeCollector
) -> None:
    source_id, fix = failed_repair(tmp_path, wakes)
    fix.touch()
    fork_id = fork_execution(source_id, from_step=2)
    drain(wakes)
    fork = get_execution(fork_id)
    assert fork.status == "failed"
    assert fork.error is not None and fork.error["message"] == "not fixed yet"
    assert attempts(fix) == 1  # the copied failure was not run again


def test_fork_points_and_ids_are_checked(on: str, tmp_path: Path, wakes: WakeCollector) -> None:
    source_id, _ = failed_repair(tmp_path, wakes)
    executions = Execution.objects.count()
    for bad in (-1, 3, 10**30):
        with pytest.raises(ForkPointError, match="from 0 to 2") as raised:
            fork_execution(source_id, from_step=bad)
        assert (raised.value.from_step, raised.value.recorded) == (bad, 2)
        assert isinstance(raised.value, ValueError)
    for wrong in ("1", 1.0, True, None):
        with pytest.raises(TypeError, match="from_step must be an int"):
            fork_execution(source_id, from_step=wrong)  # type: ignore[arg-type]
    with pytest.raises(Execution.DoesNotExist):
        fork_execution("no-such-execution", from_step=0)
    with pytest.raises(ValueError, match="x00"):
        fork_execution(source_id, from_step=0, execution_id="nul\x00")
    with pytest.raises(ValueError, match="empty"):
        fork_execution(source_id, from_step=0, execution_id="")
    with pytest.raises(ExecutionConflictError, match="is not this fork"):
        fork_execution(source_id, from_step=0, execution_id=source_id)
    assert Execution.objects.count() == executions
    assert not wakes


def test_a_fork_under_an_id_is_idempotent(on: str, tmp_path: Path, wakes: WakeCollector) -> None:
    source_id, _ = failed_repair(tmp_path, wakes)
    fork_id = unique("fork")
    assert fork_execution(source_id, from_step=1, execution_id=fork_id) == fork_id
    assert fork_execution(source_id, from_step=1, execution_id=fork_id) == fork_id
    with pytest.raises(ExecutionConflictError, match="is not this fork"):
        fork_execution(source_id, from_step=2, execution_id=fork_id)
    assert WakeIntent.objects.filter(execution_id=fork_id).count() == 1
    assert ExecutionStep.objects.filter(execution_id=fork_id).count() == 1


def test_a_fork_leaves_out_a_step_under_way(
    on: str, wakes: WakeCollector, waiting_workflow: str
) -> None:
    """A waiting take's pending heap entry is not a recorded step: a fork counts and
    copies none of it, and runs the take itself."""
    store_id = unique("store")
    source_id = start_workflow(waiting_workflow, store_id)
    drain(wakes)
    assert ExecutionStep.objects.filter(execution_id=source_id, status="pending").exists()
    with pytest.raises(ForkPointError, match="0 recorded step"):
        fork_execution(source_id, from_step=1)
    fork_id = fork_execution(source_id, from_step=0)
    drain(wakes)
    assert get_execution(fork_id).status == "waiting"
