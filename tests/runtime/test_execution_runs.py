"""The runs of an execution (``ExecutionRun``): one row per taking of the lease, written by
the statement that takes it and ended by the one that lets it go; a run that lost its lease
is never ended, and the run that took over follows it. A heap row's ``created_at`` is when
its step began."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from yieldstar_django import clock
from yieldstar_django.models import Execution, ExecutionRun
from yieldstar_django.runtime import Step, get_execution, start_workflow
from yieldstar_django.runtime.executions import ResumeResult, run_execution
from yieldstar_django.runtime.leases import worker_name

from .conftest import Runtime


def runs_of(execution_id: str) -> list[ExecutionRun]:
    return list(ExecutionRun.objects.filter(execution_id=execution_id).order_by("number"))


def test_each_run_is_recorded_with_its_worker_and_how_it_ended(rt: Runtime) -> None:
    @rt.workflow
    def wf(step: Step) -> Any:
        yield from step.run(lambda: 1)
        yield from step.sleep(60)
        return (yield from step.run(lambda: 2))

    eid = start_workflow(wf)
    try:
        rt.settle()
        assert rt.execution(eid).status == "sleeping"
        clock.advance(61)
        rt.settle(lambda: get_execution(eid).is_finished)
    finally:
        clock.reset()
    execution = rt.execution(eid)
    assert execution.status == "completed"
    runs = runs_of(eid)
    assert [r.number for r in runs] == list(range(1, execution.runs + 1))
    assert [r.outcome for r in runs] == ["sleeping", "completed"]
    assert {r.worker for r in runs} == {worker_name()}
    assert all(r.ended_at is not None and r.ended_at >= r.started_at for r in runs)
    assert all(r.lease_owner for r in runs)


def test_a_step_row_tells_when_its_step_began(rt: Runtime) -> None:
    """A step whose function takes (clock) time shows it: ``created_at`` is the start."""

    def slow() -> str:
        clock.advance(5)
        return "done"

    @rt.workflow
    def wf(step: Step) -> Any:
        return (yield from step.run(slow))

    eid = start_workflow(wf)
    try:
        rt.settle(lambda: get_execution(eid).is_finished)
    finally:
        clock.reset()
    row = rt.steps(eid)["0"]
    assert row.recorded_at is not None
    assert row.recorded_at - row.created_at >= timedelta(seconds=5)


def test_a_run_that_lost_its_lease_is_never_ended_and_the_next_takes_over(
    rt: Runtime,
) -> None:
    """Run 1's step function is running when its lease expires and run 2 takes the
    execution over (here: from inside the function, as a second worker would): the function
    runs twice, run 2 records the step and finishes, run 1 records nothing and never ends
    its row."""
    calls: list[int] = []

    def charge() -> str:
        calls.append(len(calls) + 1)
        if len(calls) == 1:
            eid = Execution.objects.get(workflow_id=wf.name).id
            Execution.objects.filter(pk=eid).update(
                lease_expires_at=timezone.now() - timedelta(seconds=1)
            )
            assert run_execution(eid) == ResumeResult.FINISHED  # the takeover
        return f"charged {len(calls)}"

    @rt.workflow
    def wf(step: Step) -> Any:
        return (yield from step.run(charge))

    eid = start_workflow(wf)
    assert run_execution(eid) == ResumeResult.LOST
    assert calls == [1, 2]
    execution = rt.execution(eid)
    assert execution.status == "completed"
    assert execution.result == "charged 2"
    first, second = runs_of(eid)
    assert (first.number, second.number) == (1, 2)
    assert first.ended_at is None and first.outcome == ""
    assert second.ended_at is not None and second.outcome == "completed"
    assert second.started_at >= first.started_at
    step = rt.steps(eid)["0"]
    assert step.created_at >= second.started_at  # begun again in run 2, which recorded it
