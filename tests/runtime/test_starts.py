"""The start contract, in Python: ``start_workflow`` (and ``Workflow.start``) binds the
arguments against the workflow's signature before anything is stored, returns the id of an
execution started again with equal arguments, and refuses an existing id with other ones
(``ExecutionConflictError``); ids and workflow names the tables cannot hold are
``StoreKeyError``. The HTTP API keeps the same contract (``tests/api``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from yieldstar_django import ExecutionConflictError, StoreKeyError
from yieldstar_django.models import Execution, WakeIntent
from yieldstar_django.runtime import Step, start_workflow, workflow

from .conftest import Runtime


def nothing_stored() -> None:
    assert not Execution.objects.exists()
    assert not WakeIntent.objects.exists()


def greeter(rt: Runtime) -> Any:
    @rt.workflow
    def greet(step: Step, name: str, *, punctuation: str = "!") -> Any:
        yield from step.sleep(0)
        return f"hello {name}{punctuation}"

    return greet


@pytest.mark.parametrize(
    ("args", "kwargs", "problem"),
    [
        ((), {}, "missing a required argument: 'name'"),
        (("a", "b"), {}, "too many positional arguments"),
        (("a",), {"exclaim": "?"}, "unexpected keyword argument 'exclaim'"),
        ((), {"name": "a", "step": 1}, "multiple values for argument 'step'"),
    ],
)
@pytest.mark.parametrize("how", ["start_workflow", "by name", "Workflow.start"])
def test_arguments_that_do_not_bind_are_a_type_error_and_nothing_is_stored(
    rt: Runtime, how: str, args: tuple[Any, ...], kwargs: dict[str, Any], problem: str
) -> None:
    """Missing arguments created an execution that failed in the worker with the
    ``TypeError`` of the call (HTTP answered ``400``): the start raises it now, naming
    the workflow and the problem, and stores nothing."""
    wf = greeter(rt)
    starts: dict[str, Callable[[], str]] = {
        "start_workflow": lambda: start_workflow(wf, *args, **kwargs),
        "by name": lambda: start_workflow(wf.name, *args, **kwargs),
        "Workflow.start": lambda: wf.start(*args, **kwargs),
    }
    with pytest.raises(TypeError, match=problem) as info:
        starts[how]()
    assert repr(wf.name) in str(info.value)
    nothing_stored()


def test_the_same_id_with_the_same_arguments_returns_it_and_starts_nothing(rt: Runtime) -> None:
    wf = greeter(rt)
    assert start_workflow(wf, "ada", execution_id="greet-1", punctuation=".") == "greet-1"
    assert start_workflow(wf, "ada", execution_id="greet-1", punctuation=".") == "greet-1"
    assert wf.start("ada", execution_id="greet-1", punctuation=".") == "greet-1"
    assert list(WakeIntent.objects.values_list("reason", flat=True)) == ["start"]
    rt.settle()
    assert rt.execution("greet-1").result == "hello ada."
    assert start_workflow(wf, "ada", execution_id="greet-1", punctuation=".") == "greet-1"


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        (("bob",), {}),  # another value
        (("ada",), {"punctuation": "!"}),  # a default made explicit
        ((), {"name": "ada"}),  # by keyword instead of position
    ],
    ids=["other value", "explicit default", "keyword for positional"],
)
def test_the_same_id_with_other_arguments_is_a_conflict_that_changes_nothing(
    rt: Runtime, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    """It returned the old id silently, so the caller believed its arguments were used.
    Arguments are compared as given (durable values), not as the call would bind them."""
    wf = greeter(rt)
    start_workflow(wf, "ada", execution_id="greet-1")
    before = Execution.objects.values().get(pk="greet-1")
    with pytest.raises(ExecutionConflictError) as info:
        start_workflow(wf, *args, execution_id="greet-1", **kwargs)
    error = info.value
    assert isinstance(error, ValueError)
    assert (error.execution_id, error.workflow_id, error.conflict) == (
        "greet-1",
        wf.name,
        "arguments",
    )
    assert "already exists" in str(error) and "other arguments" in str(error)
    assert Execution.objects.values().get(pk="greet-1") == before
    assert WakeIntent.objects.count() == 1


@pytest.mark.parametrize(("first", "again"), [(1, 1.0), (1, True), ([1], (1,))])
def test_arguments_are_compared_as_durable_values(rt: Runtime, first: Any, again: Any) -> None:
    """``1`` and ``1.0`` (or ``True``) are other arguments, as they read back otherwise; a
    tuple is stored as the list it reads back as, so it is the same argument."""

    @rt.workflow
    def wf(step: Step, value: Any) -> Any:
        yield from step.sleep(0)

    start_workflow(wf, first, execution_id="v")
    if isinstance(again, tuple):
        assert start_workflow(wf, again, execution_id="v") == "v"
    else:
        with pytest.raises(ExecutionConflictError):
            start_workflow(wf, again, execution_id="v")


def test_the_same_id_of_another_workflow_is_a_conflict(rt: Runtime) -> None:
    wf = greeter(rt)
    start_workflow(wf, "ada", execution_id="greet-1")

    @rt.workflow
    def other(step: Step, name: str) -> Any:
        yield from step.sleep(0)

    with pytest.raises(ExecutionConflictError) as info:
        start_workflow(other, "ada", execution_id="greet-1")
    assert (info.value.workflow_id, info.value.conflict) == (wf.name, "workflow")
    assert f"for workflow {wf.name!r}" in str(info.value)
    assert rt.execution("greet-1").workflow_id == wf.name


@pytest.mark.parametrize(
    ("execution_id", "limit"),
    [
        ("", "empty"),
        ("k" * 256, "length"),
        ("a\x00b", "nul"),
        ("a\ud800b", "surrogate"),
        (7, "type"),
    ],
)
def test_an_execution_id_the_tables_cannot_hold_is_a_store_key_error(
    rt: Runtime, execution_id: Any, limit: str
) -> None:
    wf = greeter(rt)
    with pytest.raises(StoreKeyError) as info:
        start_workflow(wf, "ada", execution_id=execution_id)
    assert (info.value.label, info.value.limit) == ("execution id", limit)
    assert isinstance(info.value, TypeError) == (limit == "type")
    nothing_stored()


@pytest.mark.parametrize(
    ("name", "limit"),
    [("w" * 256, "length"), ("a\x00b", "nul"), ("a\ud800", "surrogate"), (5, "type")],
)
def test_a_workflow_name_the_tables_cannot_hold_is_refused_at_registration(
    name: Any, limit: str
) -> None:
    """The name is each execution's ``workflow_id``: a name past 255 characters was
    registered, and its first start was a database error."""

    def fn(step: Step) -> Any:
        yield from step.sleep(0)

    with pytest.raises(StoreKeyError) as info:
        workflow(name)(fn)
    assert (info.value.label, info.value.limit) == ("workflow name", limit)
