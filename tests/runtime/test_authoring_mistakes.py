"""What a workflow author gets wrong, and how the runtime answers: each mistake ends the
execution with a typed, recorded error that names it (never a stuck execution, a retry
loop, a silent wrong result or a crash of the worker)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from celery.exceptions import SoftTimeLimitExceeded
from celery.worker import state as worker_state

from yieldstar_django import clock
from yieldstar_django.conf import MAX_SECONDS
from yieldstar_django.core.definition import define_store
from yieldstar_django.models import ExecutionStep
from yieldstar_django.runtime import RetryableError, Step, get_execution, start_workflow
from yieldstar_django.runtime.executions import ResumeResult, run_execution

from .conftest import Runtime


class Abort(BaseException):
    """An error that is not an ``Exception`` (as ``asyncio.CancelledError``,
    ``gevent.Timeout`` or ``trio.Cancelled`` are)."""


def cancelled() -> None:
    raise asyncio.CancelledError("the step's own task was cancelled")


def test_a_step_raising_a_base_exception_records_it(rt: Runtime) -> None:
    @rt.workflow
    def wf(step: Step) -> Any:
        try:
            yield from step.run(cancelled)
        except asyncio.CancelledError as exc:
            yield from step.run(str.upper, str(exc), key="caught")
        yield from step.run(cancelled, key="again")

    eid = start_workflow(wf)
    rt.settle()
    execution = get_execution(eid)
    assert execution.status == "failed", execution.status
    assert execution.error is not None
    assert execution.error["type"] == "asyncio.exceptions:CancelledError"
    assert execution.error["message"] == "the step's own task was cancelled"
    steps = rt.steps(eid)
    assert steps["0"].status == steps["again"].status == "failed"
    assert steps["caught"].value == "THE STEP'S OWN TASK WAS CANCELLED"
    assert execution.runs == 1


def test_a_workflow_raising_a_base_exception_fails(rt: Runtime) -> None:
    @rt.workflow
    def wf(step: Step) -> Any:
        yield from step.sleep(0)
        raise Abort("the workflow gave up")

    eid = start_workflow(wf)
    rt.settle()
    execution = get_execution(eid)
    assert execution.status == "failed", execution.status
    assert execution.error is not None
    assert execution.error["type"].endswith(":Abort")
    assert execution.error["message"] == "the workflow gave up"


@pytest.mark.parametrize("exit_error", [KeyboardInterrupt, SystemExit])
def test_the_worker_s_own_exits_are_not_recorded(rt: Runtime, exit_error: type) -> None:
    """A worker told to stop (Ctrl-C, a warm shutdown of Celery's solo pool) stops: the
    step is not recorded as failed, and the execution runs again later."""
    stop = [True]

    def interrupted() -> str:
        if stop.pop() if stop else False:
            raise exit_error()
        return "done"

    @rt.workflow
    def wf(step: Step) -> Any:
        return (yield from step.run(interrupted))

    eid = start_workflow(wf)
    with pytest.raises(exit_error):
        run_execution(eid)
    assert not ExecutionStep.objects.filter(execution_id=eid).exists()
    assert run_execution(eid) == ResumeResult.FINISHED
    assert get_execution(eid).result == "done"


def test_a_time_limit_between_steps_is_not_recorded(rt: Runtime) -> None:
    """Celery's soft time limit may fire while the workflow's own code runs, between two
    steps: that is the worker's limit, not the workflow's failure."""
    limit = [True]

    @rt.workflow
    def wf(step: Step) -> Any:
        yield from step.sleep(0)
        if limit.pop() if limit else False:
            raise SoftTimeLimitExceeded()
        return "done"

    eid = start_workflow(wf)
    with pytest.raises(SoftTimeLimitExceeded):
        run_execution(eid)
    assert get_execution(eid).status == "running"
    assert run_execution(eid) == ResumeResult.FINISHED
    assert get_execution(eid).result == "done"


def _limited_once() -> Any:
    """A callable that raises Celery's soft time limit on its first call only."""
    limit = [True]

    def check() -> None:
        if limit and limit.pop():
            raise SoftTimeLimitExceeded()

    return check


@pytest.mark.parametrize("where", ["take selector", "take claim", "update", "take_any"])
def test_a_time_limit_in_a_store_step_s_user_code_is_not_recorded(rt: Runtime, where: str) -> None:
    """Celery's soft time limit may fire while a selector, claim or updater runs: that is
    the worker's limit, not the step's error, so the run ends unrecorded (as in a
    ``step.run`` function or between steps) and the next run completes the step."""
    store = rt.define(initial=lambda id: {"items": ["a"]})
    limit = _limited_once()

    def first(state: Any) -> Any:
        if where in ("take selector", "take_any"):
            limit()
        return state["items"][0] if state["items"] else None

    def pop(draft: Any, selected: Any) -> None:
        if where == "take claim":
            limit()
        draft["items"].remove(selected)

    def append(draft: Any) -> None:
        limit()
        draft["items"].append("b")

    @rt.workflow
    def wf(step: Step) -> Any:
        if where == "update":
            result = yield from step.update(store, "s", append)
            return result.state["items"]
        if where == "take_any":
            return (yield from step.take_any([(store, "s", first, pop)]))
        return (yield from step.take(store, "s", first, pop))

    eid = start_workflow(wf)
    with pytest.raises(SoftTimeLimitExceeded):
        run_execution(eid)
    assert get_execution(eid).status == "running"
    assert not [s for s in rt.steps(eid).values() if s.status == "failed"]
    assert run_execution(eid) == ResumeResult.FINISHED
    execution = get_execution(eid)
    assert execution.status == "completed", (execution.status, execution.error)
    expected = {"update": ["a", "b"], "take_any": [0, "a"]}.get(where, "a")
    assert execution.result == expected


@pytest.mark.parametrize("where", ["run", "between steps", "update", "take selector"])
def test_an_error_raised_while_the_worker_shuts_down_cold_is_not_recorded(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A cold shutdown of a Celery worker (SIGQUIT, a second Ctrl+C) cancels the tasks in
    progress from its signal handler; in the solo pool that handler runs in the thread of
    the task, and what it raises (``NotImplementedError``: the solo pool cannot cancel)
    surfaces wherever the workflow was. Celery has set ``should_terminate`` by then. That
    is the worker stopping, not the step or the workflow failing: the run ends unrecorded
    and the next one (in another worker) completes the execution."""
    monkeypatch.setattr(worker_state, "should_terminate", None)
    store = rt.define(initial=lambda id: {"items": ["a"]})
    pending = [True]

    def cold_shutdown(here: str) -> None:
        if where == here and pending and pending.pop():
            worker_state.should_terminate = 1  # EX_FAILURE, as Celery's handler sets it
            raise NotImplementedError(
                "<class 'celery.concurrency.solo.TaskPool'> does not implement kill_job"
            )

    def work() -> str:
        cold_shutdown("run")
        return "worked"

    def first(state: Any) -> Any:
        cold_shutdown("take selector")
        return state["items"][0] if state["items"] else None

    def append(draft: Any) -> None:
        cold_shutdown("update")
        draft["items"].append("b")

    @rt.workflow
    def wf(step: Step) -> Any:
        done = [(yield from step.run(work))]
        cold_shutdown("between steps")
        done.append((yield from step.update(store, "s", append)).state["items"])
        done.append((yield from step.take(store, "s", first, lambda d, s: d["items"].remove(s))))
        return done

    eid = start_workflow(wf)
    with pytest.raises(BaseException):  # noqa: B017 (whatever stops the run, unrecorded)
        run_execution(eid)
    assert get_execution(eid).status == "running"
    assert not [s for s in rt.steps(eid).values() if s.status == "failed"]
    worker_state.should_terminate = None  # the next run is another worker's
    assert run_execution(eid) == ResumeResult.FINISHED
    execution = get_execution(eid)
    assert execution.status == "completed", (execution.status, execution.error)
    assert execution.result == ["worked", ["a", "b"], "a"]


def test_a_time_limit_recorded_by_an_earlier_version_fails_the_execution(rt: Runtime) -> None:
    """A heap written before store steps let the worker's stops through may hold one as a
    step's error. Replayed into the workflow, it is that record, not a stop of this run:
    the execution fails with it instead of stopping every run, unrecorded, for ever."""
    from yieldstar_django.runtime.outcomes import encode_error

    store = rt.define(initial=lambda id: {"items": ["a"]})

    @rt.workflow
    def wf(step: Step) -> Any:
        yield from step.take(store, "s", lambda s: s["items"][0], None)
        return "done"

    eid = start_workflow(wf)
    assert run_execution(eid) == ResumeResult.FINISHED
    ExecutionStep.objects.filter(execution_id=eid, step_key="0").update(
        status="failed", value_json="", error_json=encode_error(SoftTimeLimitExceeded("old"))
    )
    type(get_execution(eid)).objects.filter(pk=eid).update(status="running", result_json="")
    assert run_execution(eid) == ResumeResult.FINISHED
    execution = get_execution(eid)
    assert execution.status == "failed", execution.status
    assert execution.error is not None
    limit = SoftTimeLimitExceeded
    assert execution.error["type"] == f"{limit.__module__}:{limit.__qualname__}"


def one() -> int:
    return 1


def test_a_step_used_twice_fails_the_execution(rt: Runtime) -> None:
    """A step is one request: a second ``yield from`` of it has nothing to ask, and Python
    made it return ``None`` at once, a silent wrong result."""

    @rt.workflow
    def wf(step: Step) -> Any:
        made = step.run(one)
        first = yield from made
        second = yield from made
        return [first, second]

    eid = start_workflow(wf)
    rt.settle()
    execution = get_execution(eid)
    assert execution.status == "failed", (execution.status, execution.result)
    assert execution.error is not None
    assert execution.error["type"] == "builtins:RuntimeError"
    assert "step.run()" in execution.error["message"]
    assert "once" in execution.error["message"]
    assert list(rt.steps(eid)) == ["0"]


def test_a_step_tested_for_truth_fails_the_execution(rt: Runtime) -> None:
    """``if step.patched("x"):`` without ``yield from`` tested the step itself, always
    true: every execution took the new branch, the recorded ones included."""

    @rt.workflow
    def wf(step: Step) -> Any:
        if step.patched("new-greeting"):
            return "new"
        yield from step.run(one)
        return "old"

    eid = start_workflow(wf)
    rt.settle()
    execution = get_execution(eid)
    assert execution.status == "failed", (execution.status, execution.result)
    assert execution.error is not None
    assert execution.error["type"] == "builtins:TypeError"
    assert "(yield from step.patched(" in execution.error["message"]
    assert not rt.steps(eid)


def test_a_step_made_but_never_used_fails_the_execution(rt: Runtime) -> None:
    """``step.update(...)`` without ``yield from`` makes a step and runs nothing: the
    execution completed as if the store had been updated."""
    store = rt.define()

    @rt.workflow
    def wf(step: Step) -> Any:
        step.update(store, "a", lambda draft: draft["items"].append("paid"))
        yield from step.sleep(0)
        return "done"

    eid = start_workflow(wf)
    rt.settle()
    execution = get_execution(eid)
    assert execution.status == "failed", (execution.status, execution.result)
    assert execution.error is not None
    assert execution.error["type"] == "builtins:TypeError"
    assert "step.update()" in execution.error["message"]
    assert "yield from" in execution.error["message"]
    assert rt.client.get_store(store, "a").state == {"items": []}


def test_steps_made_ahead_and_used_later_complete(rt: Runtime) -> None:
    @rt.workflow
    def wf(step: Step) -> Any:
        first = step.run(one, key="first")
        second = step.run(str, 2, key="second")
        return [(yield from second), (yield from first)]

    eid = start_workflow(wf)
    rt.settle()
    assert get_execution(eid).result == ["2", 1]


HUGE = 10**400  # an int past a float's range: math.isfinite() raises OverflowError


def test_an_int_of_seconds_past_a_float_s_range_is_a_value_error(rt: Runtime) -> None:
    """``step.sleep(10**400)`` failed with ``OverflowError: int too large to convert to
    float``, naming neither the sleep nor its limit; the docs promise ``ValueError``."""

    @rt.workflow
    def wf(step: Step) -> Any:
        refused = []
        for seconds in (HUGE, -HUGE):
            try:
                yield from step.sleep(seconds)
            except ValueError as exc:
                refused.append(str(exc).split(":")[0])
        return refused

    eid = start_workflow(wf)
    rt.settle()
    assert get_execution(eid).result == [
        f"sleep()'s time is at most {MAX_SECONDS} seconds (100 years)",
        "sleep()'s time must be a finite, non-negative number of seconds",
    ]
    store = rt.define()
    leased = define_store(rt.name("store"), None, initial=lambda id: {}, release=lambda d, v: 0)
    rt.stores.append(leased.name)
    step = Step("e", "w")
    with pytest.raises(ValueError, match="take_any\\(\\)'s timeout is at most"):
        next(step.take_any([(store, "a", lambda s: s, None)], timeout=HUGE))
    with pytest.raises(ValueError, match="take\\(\\)'s lease is at most"):
        next(step.take(leased, "a", lambda s: s, lease=HUGE))
    # As one of 1e300 s: accepted, each wait capped at 100 years.
    assert RetryableError(retry_interval=HUGE, backoff=HUGE).delay_after(3) == MAX_SECONDS
    with pytest.raises(ValueError, match="time only moves forward"):
        clock.advance(-HUGE)
    with pytest.raises(ValueError, match="100 years"):
        clock.advance(HUGE)


class Declined(Exception):
    """A custom error whose message reads an attribute that is not a durable value."""

    def __init__(self, response: object) -> None:
        super().__init__()
        self.response = response

    def __str__(self) -> str:
        return f"declined: {self.response!r}"


class Response:
    def __repr__(self) -> str:
        return "<Response 402>"


def decline() -> None:
    raise Declined(Response())


def bad_bytes() -> str:
    return b"\xff".decode()


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (bad_bytes, "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"),
        (decline, "declined: <Response 402>"),
    ],
)
def test_an_uncaught_revived_error_fails_with_its_recorded_message(
    rt: Runtime, fn: Any, message: str
) -> None:
    """The workflow meets the error as recorded, revived without ``__init__``: a
    ``UnicodeDecodeError``'s ``str()`` was then empty, and ``str()`` of an error that reads
    an attribute not recorded raised, so the execution failed with the message ``""`` or
    ``"<Declined: str() failed>"``, though the step recorded the real one."""

    @rt.workflow
    def wf(step: Step) -> Any:
        yield from step.run(fn)

    eid = start_workflow(wf)
    rt.settle()
    execution = get_execution(eid)
    assert execution.status == "failed"
    assert rt.steps(eid)["0"].error["message"] == message
    assert execution.error is not None and execution.error["message"] == message
