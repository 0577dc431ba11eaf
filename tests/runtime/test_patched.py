"""``step.patched``: a deploy that changes a workflow under running executions."""

from __future__ import annotations

from typing import Any

import pytest

from yieldstar_django import StoreKeyError
from yieldstar_django.runtime import Step, get_execution, start_workflow

from .conftest import Runtime


def a() -> str:
    return "a"


def b() -> str:
    return "b"


def c() -> str:
    return "c"


def test_recorded_execution_keeps_the_old_branch_and_a_new_one_takes_the_new(
    rt: Runtime,
) -> None:
    version = {"v": 1}

    @rt.workflow
    def wf(step: Step) -> Any:
        done = [(yield from step.run(a))]
        if version["v"] == 2 and (yield from step.patched("add-c")):
            done.append((yield from step.run(c)))
        yield from step.sleep(0.05)
        done.append((yield from step.run(b)))
        return done

    old = start_workflow(wf)
    rt.pump()
    assert get_execution(old).status == "sleeping"
    version["v"] = 2  # the deploy: executions recorded so far passed the patch point
    new = start_workflow(wf)
    rt.settle(lambda: get_execution(old).is_finished and get_execution(new).is_finished)
    assert get_execution(old).status == "completed", get_execution(old).error
    assert get_execution(old).result == ["a", "b"]
    assert get_execution(new).result == ["a", "c", "b"]
    assert rt.steps(old)["patch:add-c"].value_json == "false"
    assert rt.steps(new)["patch:add-c"].value_json == "true"
    # The patch took no step index: the sleep kept key "1" in the old execution.
    assert rt.steps(old)["1"].kind == "sleep"


def test_execution_at_its_frontier_takes_the_new_branch_on_every_replay(rt: Runtime) -> None:
    version = {"v": 1}
    calls: list[str] = []

    def c_counted() -> str:
        calls.append("c")
        return "c"

    @rt.workflow
    def wf(step: Step) -> Any:
        done = [(yield from step.run(a))]
        yield from step.sleep(0.05)
        if version["v"] == 2 and (yield from step.patched("add-c")):
            done.append((yield from step.run(c_counted)))
            yield from step.sleep(0.05, key="after-c")  # forces another replay
        done.append((yield from step.run(b)))
        return done

    eid = start_workflow(wf)
    rt.pump()
    assert get_execution(eid).status == "sleeping"
    version["v"] = 2  # nothing is recorded past the patch point yet
    rt.settle(lambda: get_execution(eid).is_finished)
    assert get_execution(eid).status == "completed", get_execution(eid).error
    assert get_execution(eid).result == ["a", "c", "b"]
    assert calls == ["c"]
    assert rt.steps(eid)["patch:add-c"].value_json == "true"


def test_unpatched_change_names_both_steps_and_suggests_patched(rt: Runtime) -> None:
    version = {"v": 1}

    @rt.workflow
    def wf(step: Step) -> Any:
        yield from step.run(a)
        if version["v"] == 2:
            yield from step.run(c)
        yield from step.sleep(0.05)
        return (yield from step.run(b))

    message = rt.nondeterminism_after(wf, lambda: version.update(v=2))
    assert "step '1'" in message
    assert "kind 'run'" in message and "kind 'sleep'" in message
    assert "test_patched.c" in message
    assert "step.patched" in message


def test_a_change_id_checked_twice_fails_the_execution(rt: Runtime) -> None:
    @rt.workflow
    def wf(step: Step) -> Any:
        yield from step.patched("x")
        yield from step.patched("x")

    eid = start_workflow(wf)
    rt.settle()
    error = get_execution(eid).error
    assert error is not None and error["type"] == "StepKeyError"


@pytest.mark.parametrize(("change_id", "limit"), [("", "empty"), (None, "type"), (3, "type")])
def test_bad_change_id_is_a_store_key_error(change_id: Any, limit: str) -> None:
    """A change id is the step key's tail: a bad one is a ``StoreKeyError`` naming the
    rule (also a ``TypeError`` when it is not a ``str``)."""
    step = Step("e", "w")
    with pytest.raises(StoreKeyError) as info:
        next(step.patched(change_id))
    assert (info.value.label, info.value.limit) == ("change id", limit)
    assert isinstance(info.value, TypeError) == (limit == "type")
