"""A resume gives its worker back after ``RUN_SLICE_SECONDS`` of steps: it stops before the
next step it would execute, releases the lease with a run requested at once (a wake
intent, delivered like any other), and the next resume goes on from the recorded steps.
Replayed steps do not count, and every resume executes at least one step, so a long
run still finishes. On PostgreSQL and SQLite, outside any transaction (as in a worker)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.shared import outside
from tests.shared.fixtures import WakeCollector, configure
from yieldstar_django.models import Execution, ExecutionStep, WakeIntent
from yieldstar_django.runtime import executions
from yieldstar_django.runtime.executions import ResumeResult
from yieldstar_django.runtime.registry import unregister_workflow, workflow
from yieldstar_django.runtime.steps import Step

STEP = 0.15


@pytest.fixture
def routed(alias: str) -> Iterator[str]:
    with outside.runtime_on(alias):
        yield alias


@pytest.fixture
def named() -> Iterator[Callable[[Callable[..., Any]], str]]:
    made: list[str] = []

    def register(fn: Callable[..., Any]) -> str:
        name = f"slices-{len(made)}-{id(fn)}"
        workflow(name)(fn)
        made.append(name)
        return name

    yield register
    for name in made:
        unregister_workflow(name)


def work(index: int) -> int:
    time.sleep(STEP)
    return index


def five_steps(step: Step) -> Any:
    total = 0
    for index in range(5):
        total += yield from step.run(work, index)
    return total


def recorded(execution_id: str) -> int:
    return ExecutionStep.objects.filter(execution_id=execution_id).count()


def test_a_run_gives_its_worker_back_after_its_slice(
    routed: str, named: Callable[[Callable[..., Any]], str], wakes: WakeCollector
) -> None:
    name = named(five_steps)
    outside.start(routed, name, "sliced")
    with configure(RUN_SLICE_SECONDS=STEP * 1.5):
        wakes.clear()
        assert executions.run_execution("sliced") == ResumeResult.DEFERRED
        # Two steps: the slice ends during the second, and the run stops before the third.
        assert recorded("sliced") == 2
        execution = Execution.objects.get(pk="sliced")
        assert execution.lease_owner == "" and execution.status == "running"
        assert [w.execution_id for w in wakes] == ["sliced"], "a run requested at once"
        assert WakeIntent.objects.filter(execution_id="sliced", delivered_at__isnull=True)
        outcomes = [executions.run_execution("sliced"), recorded("sliced")]
        outcomes += [executions.run_execution("sliced"), recorded("sliced")]
    # Steps 2-3 (the replays of 0-1 do not count), then 4 and the end.
    assert outcomes == [ResumeResult.DEFERRED, 4, ResumeResult.FINISHED, 5]
    execution = Execution.objects.get(pk="sliced")
    assert execution.status == "completed" and execution.result == 10


def test_replayed_steps_do_not_use_the_slice(
    routed: str, named: Callable[[Callable[..., Any]], str], wakes: WakeCollector
) -> None:
    """A slice shorter than any step: each resume replays what is recorded and executes
    one step more (never none), until the run finishes."""
    name = named(five_steps)
    outside.start(routed, name, "tiny")
    with configure(RUN_SLICE_SECONDS=STEP / 10):
        for expected in range(1, 5):
            assert executions.run_execution("tiny") == ResumeResult.DEFERRED
            assert recorded("tiny") == expected
        assert executions.run_execution("tiny") == ResumeResult.FINISHED  # step 4, the end
    assert Execution.objects.get(pk="tiny").result == 10


def test_without_a_slice_a_resume_runs_to_the_end(
    routed: str, named: Callable[[Callable[..., Any]], str], wakes: WakeCollector
) -> None:
    name = named(five_steps)
    outside.start(routed, name, "whole")
    with configure(RUN_SLICE_SECONDS=None):
        assert executions.run_execution("whole") == ResumeResult.FINISHED
    assert recorded("whole") == 5
