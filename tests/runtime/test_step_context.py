"""The step contract (``runtime/context.py``): a step kind written only against ``Kind`` and
``StepContext`` records once, replays what it recorded, and gets the engine's end-of-step
error handling (an error recorded once, contention retried, a database error let through
unrecorded) without writing any of it."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import pytest
from django.db import DatabaseError

from yieldstar_django.core.durable import encode_durable
from yieldstar_django.core.errors import StoreContentionError
from yieldstar_django.runtime import Step, context, executions, get_execution, start_workflow
from yieldstar_django.runtime.context import Kind, StepContext
from yieldstar_django.runtime.kinds import KINDS
from yieldstar_django.runtime.outcomes import StepResult, StepValue
from yieldstar_django.runtime.steps import StepCall, callable_name

from .conftest import Runtime

#: The arguments each call of a ``counted`` step's function was given.
CALLS: list[Any] = []


def execute_counted(ctx: StepContext) -> StepResult:
    """A kind's whole ``execute``: call the step's function, record its durable result."""
    assert ctx.call.fn is not None
    value = ctx.call.fn(*ctx.call.args)
    ctx.record(encode_durable(value, limits=ctx.limits, step_key=ctx.key))
    return StepValue(value)


COUNTED = Kind("counted", execute_counted)


def counted(fn: Callable[..., Any], *args: Any) -> Generator[StepCall, Any, Any]:
    """The kind's primitive: ``value = yield from counted(fn, *args)``."""
    return (yield StepCall("counted", None, callable_name(fn), fn=fn, args=args))


def double(x: int) -> int:
    CALLS.append(x)
    return 2 * x


def refuse(x: int) -> int:
    CALLS.append(x)
    raise ValueError(f"no {x}")


@pytest.fixture(autouse=True)
def counted_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    CALLS.clear()
    monkeypatch.setitem(KINDS, COUNTED.name, COUNTED)
    monkeypatch.setattr(context, "CONTENTION_RETRY_SECONDS", 0.05)


def runs_of(rt: Runtime, eid: str) -> int:
    return sum(1 for execution_id, _ in rt.resumes if execution_id == eid)


def test_a_kind_records_its_value_once_and_replays_it(rt: Runtime) -> None:
    @rt.workflow
    def wf(step: Step) -> Any:
        value = yield from counted(double, 21)
        yield from step.sleep(0.05)  # the run suspends; the next replays the step
        return value

    eid = start_workflow(wf)
    rt.settle(lambda: get_execution(eid).is_finished)
    assert get_execution(eid).result == 42
    assert runs_of(rt, eid) >= 2
    assert CALLS == [21]
    row = rt.steps(eid)["0"]
    assert (row.kind, row.status, row.value_json, row.fingerprint) == (
        "counted",
        "completed",
        "42",
        callable_name(double),
    )


def test_an_error_of_a_kind_is_recorded_once_and_thrown_in_on_every_replay(
    rt: Runtime,
) -> None:
    caught: list[str] = []

    @rt.workflow
    def wf(step: Step) -> Any:
        try:
            yield from counted(refuse, 7)
        except ValueError as exc:
            caught.append(str(exc))
        yield from step.sleep(0.05)
        return caught[-1]

    eid = start_workflow(wf)
    rt.settle(lambda: get_execution(eid).is_finished)
    assert get_execution(eid).result == "no 7"
    assert CALLS == [7]
    assert caught == ["no 7", "no 7"]
    row = rt.steps(eid)["0"]
    assert (row.status, row.attempts) == ("failed", 1)
    assert row.error is not None and row.error["type"] == "builtins:ValueError"


def test_contention_in_a_kind_runs_the_step_again_later_with_nothing_recorded(
    rt: Runtime,
) -> None:
    def contended_once(x: int) -> int:
        CALLS.append(x)
        if len(CALLS) == 1:
            raise StoreContentionError("s", "id", 3)
        return x

    @rt.workflow
    def wf(step: Step) -> Any:
        return (yield from counted(contended_once, 5))

    eid = start_workflow(wf)
    rt.pump()
    assert get_execution(eid).status == "retrying"
    assert "0" not in rt.steps(eid)
    rt.settle(lambda: get_execution(eid).is_finished)
    assert get_execution(eid).result == 5
    assert CALLS == [5, 5]
    assert rt.steps(eid)["0"].status == "completed"


def test_a_database_error_in_a_kind_ends_the_run_unrecorded(rt: Runtime) -> None:
    def down_once(x: int) -> int:
        CALLS.append(x)
        if len(CALLS) == 1:
            raise DatabaseError("the database went away")
        return x

    @rt.workflow
    def wf(step: Step) -> Any:
        return (yield from counted(down_once, 3))

    eid = start_workflow(wf)
    with pytest.raises(DatabaseError):
        rt.pump()
    assert "0" not in rt.steps(eid)
    assert not get_execution(eid).is_finished
    executions.run_execution(eid)  # the next run (a wake, the lease's timer)
    assert get_execution(eid).result == 3
    assert CALLS == [3, 3]
