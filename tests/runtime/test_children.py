"""Child workflows: ``step.start``, ``step.start_many``, ``step.wait``, ``step.gather``;
cancellation that reaches children; deadlines.

Runs are real runs (``run_execution``) driven in-process by the ``rt`` harness on the
test database (PostgreSQL by default, SQLite with a ``sqlite:`` ``DATABASE_URL``).
"""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from yieldstar_django import (
    ChildCancelledError,
    ChildFailedError,
    DeadlineExceededError,
    ExecutionConflictError,
    clock,
)
from yieldstar_django.models import ChildWait, Execution, WakeIntent
from yieldstar_django.runtime import Step, cancel_execution, get_execution, start_workflow
from yieldstar_django.runtime.executions import run_execution

from .conftest import WAKES, Runtime

#: Runs of the child workflows, by execution id (a child runs its function once).
CALLS: dict[str, int] = {}


def count(step: Step) -> None:
    CALLS[step.execution_id] = CALLS.get(step.execution_id, 0) + 1


def double(step: Step, x: int) -> Any:
    yield from step.run(lambda: None, key="noop")
    return x * 2


def test_start_and_wait_return_the_child_result(rt: Runtime) -> None:
    child = rt.workflow(double)

    @rt.workflow
    def parent(step: Step, x: int) -> Any:
        child_id = yield from step.start(child, x)
        result = yield from step.wait(child_id)
        return {"child": child_id, "result": result}

    eid = start_workflow(parent, 21)
    rt.settle()
    execution = get_execution(eid)
    assert execution.status == "completed", execution.error
    assert execution.result == {"child": f"{eid}:0", "result": 42}
    child_row = get_execution(f"{eid}:0")
    assert child_row.parent == eid
    assert child_row.status == "completed"
    assert not ChildWait.objects.exists()


def test_a_child_id_can_be_given_and_any_execution_awaited(rt: Runtime) -> None:
    child = rt.workflow(double)
    other = start_workflow(child, 5)

    @rt.workflow
    def parent(step: Step) -> Any:
        mine = yield from step.start(child, 1, execution_id="given-child-id")
        a = yield from step.wait(mine)
        b = yield from step.wait(other)
        return [a, b]

    eid = start_workflow(parent)
    rt.settle()
    assert get_execution(eid).result == [2, 10]
    assert get_execution("given-child-id").parent == eid
    assert get_execution(other).parent == ""


def test_a_given_id_of_another_workflow_fails_the_step(rt: Runtime) -> None:
    child = rt.workflow(double)
    other = rt.workflow(double)
    start_workflow(other, 1, execution_id="taken-id")

    @rt.workflow
    def parent(step: Step) -> Any:
        try:
            yield from step.start(child, 1, execution_id="taken-id")
        except ExecutionConflictError as exc:
            return exc.conflict
        return "started"

    eid = start_workflow(parent)
    rt.settle()
    assert get_execution(eid).result == "workflow"
    assert Execution.objects.filter(parent=eid).count() == 0


def test_start_many_and_gather_return_results_in_order(rt: Runtime) -> None:
    child = rt.workflow(double)

    @rt.workflow
    def parent(step: Step, n: int) -> Any:
        ids = yield from step.start_many(child, [[i] for i in range(n)])
        return (yield from step.gather(ids))

    eid = start_workflow(parent, 30)
    rt.settle()
    execution = get_execution(eid)
    assert execution.status == "completed", execution.error
    assert execution.result == [i * 2 for i in range(30)]
    assert Execution.objects.filter(parent=eid).count() == 30
    # Started in one step, gathered in one wake: two runs of the parent.
    assert execution.runs == 2


def test_a_failed_child_raises_child_failed_error_with_its_type_and_message(
    rt: Runtime,
) -> None:
    def broken(step: Step) -> Any:
        def fail() -> None:
            raise KeyError("missing thing")

        yield from step.run(fail)

    child = rt.workflow(broken)

    @rt.workflow
    def parent(step: Step) -> Any:
        child_id = yield from step.start(child)
        try:
            yield from step.wait(child_id)
        except ChildFailedError as exc:
            return [exc.execution_id, exc.error_type, exc.error_message]
        return "no error"

    eid = start_workflow(parent)
    rt.settle()
    assert get_execution(eid).result == [f"{eid}:0", "builtins:KeyError", "'missing thing'"]


def test_a_cancelled_child_raises_child_cancelled_error(rt: Runtime) -> None:
    def waits(step: Step) -> Any:
        yield from step.sleep(3600)

    child = rt.workflow(waits)

    @rt.workflow
    def parent(step: Step) -> Any:
        child_id = yield from step.start(child)
        try:
            yield from step.wait(child_id)
        except ChildCancelledError as exc:
            return exc.execution_id
        return "no error"

    eid = start_workflow(parent)
    rt.settle()
    assert get_execution(eid).status == "waiting"
    assert cancel_execution(f"{eid}:0")
    rt.settle()
    assert get_execution(eid).result == f"{eid}:0"


def test_wait_for_a_missing_execution_raises_lookup_error(rt: Runtime) -> None:
    @rt.workflow
    def parent(step: Step) -> Any:
        try:
            yield from step.wait("no-such-execution")
        except LookupError:
            return "missing"
        return "found"

    eid = start_workflow(parent)
    rt.settle()
    assert get_execution(eid).result == "missing"


def test_replays_start_no_second_child(rt: Runtime) -> None:
    child = rt.workflow(double)

    @rt.workflow
    def parent(step: Step) -> Any:
        ids = yield from step.start_many(child, [[1], [2]])
        yield from step.sleep(0.0, key="s")
        yield from step.sleep(60, key="later")
        return (yield from step.gather(ids))

    eid = start_workflow(parent)
    rt.settle()
    assert get_execution(eid).status == "sleeping"
    for _ in range(3):  # spurious wakes replay the start step
        run_execution(eid)
    assert Execution.objects.filter(parent=eid).count() == 2
    clock.advance(timedelta(seconds=61))
    try:
        rt.settle()
    finally:
        clock.reset()
    assert get_execution(eid).result == [2, 4]


def test_start_many_writes_its_children_in_statements_not_per_child(rt: Runtime) -> None:
    """On PostgreSQL the children's rows and their wake intents are one statement each
    (per 2,000): the start step's cost does not grow by a round trip per child."""
    if connection.vendor != "postgresql":
        pytest.skip("one statement per child on other databases (bulk_create, an intent each)")
    child = rt.workflow(double)

    @rt.workflow
    def parent(step: Step, n: int) -> Any:
        return (yield from step.start_many(child, [[i] for i in range(n)]))

    eid = start_workflow(parent, 300)
    WAKES.clear()
    with CaptureQueriesContext(connection) as queries:
        assert run_execution(eid) == "finished"
    assert len(queries) < 20, [q["sql"][:60] for q in queries]
    children = Execution.objects.filter(parent=eid)
    assert children.count() == 300
    assert set(children.values_list("status", "runs", "workflow_id", "deadline")) == {
        ("pending", 0, child.name, None)
    }
    assert {row.id: row.input for row in children} == {
        f"{eid}:0:{i}": {"args": [i], "kwargs": {}} for i in range(300)
    }
    intents = list(
        WakeIntent.objects.filter(execution_id__startswith=f"{eid}:")
        .order_by("id")
        .values_list("execution_id", "reason")
    )
    assert intents == [(f"{eid}:0:{i}", "start") for i in range(300)]
    rt.settle()
    assert sorted(children.values_list("result_json", flat=True)) == sorted(
        str(i * 2) for i in range(300)
    )


@pytest.mark.parametrize("client_kind", ["db"], indirect=True)
def test_a_thousand_children_finishing_in_any_order_resume_the_parent_once(
    rt: Runtime,
) -> None:
    n = 1000
    release = rt.define(initial=lambda id: {"go": False})

    def held(step: Step, i: int) -> Any:
        yield from step.take(release, f"child-{i}", lambda s: s["go"] or None)
        return i

    child = rt.workflow(held)

    @rt.workflow
    def parent(step: Step, n: int) -> Any:
        ids = yield from step.start_many(child, [[i] for i in range(n)])
        results = yield from step.gather(ids)
        return sum(results)

    eid = start_workflow(parent, n)
    rt.settle()
    assert get_execution(eid).status == "waiting"
    assert get_execution(eid).runs == 1
    order = list(range(n))
    random.Random(7).shuffle(order)
    for i in order:
        rt.client.update_store(release, f"child-{i}", updater=lambda d: d.update(go=True))
        rt.pump()
    execution = get_execution(eid)
    assert execution.status == "completed", execution.error
    assert execution.result == sum(range(n))
    assert execution.runs <= 3
    assert execution.runs == 2
    # Every child ran to its end exactly once after its release: one wake, one run.
    runs = Execution.objects.filter(parent=eid).values_list("runs", flat=True)
    assert sorted(set(runs)) == [2]
    assert not ChildWait.objects.filter(execution_id=eid).exists()


def test_cancel_reaches_children_transitively(rt: Runtime) -> None:
    def sleeper(step: Step) -> Any:
        yield from step.sleep(3600)

    leaf = rt.workflow(sleeper)

    def middle_fn(step: Step) -> Any:
        ids = yield from step.start_many(leaf, [[], []])
        return (yield from step.gather(ids))

    middle = rt.workflow(middle_fn)

    @rt.workflow
    def top(step: Step) -> Any:
        child_id = yield from step.start(middle)
        return (yield from step.wait(child_id))

    eid = start_workflow(top)
    rt.settle()
    tree = [eid, f"{eid}:0", f"{eid}:0:0:0", f"{eid}:0:0:1"]
    assert [get_execution(i).status for i in tree] == ["waiting", "waiting", "sleeping", "sleeping"]
    assert cancel_execution(eid)
    assert [get_execution(i).status for i in tree] == ["cancelled"] * 4
    assert not ChildWait.objects.exists()
    assert not WakeIntent.objects.filter(execution_id__in=tree, delivered_at__isnull=True).exists()
    rt.settle()
    assert [get_execution(i).status for i in tree] == ["cancelled"] * 4


def test_cancelling_a_finished_execution_leaves_its_children(rt: Runtime) -> None:
    def sleeper(step: Step) -> Any:
        yield from step.sleep(3600)

    leaf = rt.workflow(sleeper)

    @rt.workflow
    def fire_and_forget(step: Step) -> Any:
        return (yield from step.start(leaf))

    eid = start_workflow(fire_and_forget)
    rt.settle()
    assert get_execution(eid).status == "completed"
    assert not cancel_execution(eid)
    assert get_execution(f"{eid}:0").status == "sleeping"


def test_a_deadline_cancels_the_execution_and_its_children(rt: Runtime) -> None:
    def sleeper(step: Step) -> Any:
        yield from step.sleep(3600)

    leaf = rt.workflow(sleeper)

    @rt.workflow
    def top(step: Step) -> Any:
        ids = yield from step.start_many(leaf, [[], []])
        return (yield from step.gather(ids))

    eid = start_workflow(top, timeout=30)
    rt.settle()
    deadline = get_execution(eid).deadline
    assert deadline is not None
    children = [f"{eid}:0:0", f"{eid}:0:1"]
    # A child's deadline is its parent's (capped), kept by the parent's cancel.
    assert [get_execution(c).deadline for c in children] == [deadline, deadline]
    clock.advance(timedelta(seconds=31))
    try:
        rt.settle()
    finally:
        clock.reset()
    for id in [eid, *children]:
        execution = get_execution(id)
        assert execution.status == "cancelled"
        assert execution.error is not None
        assert execution.error["type"] == "DeadlineExceededError"
        assert execution.error["attrs"]["execution_id"] == eid


def test_a_workflow_timeout_is_its_executions_deadline_and_caps_its_childrens(
    rt: Runtime,
) -> None:
    def sleeper(step: Step) -> Any:
        yield from step.sleep(3600)

    from yieldstar_django.runtime import workflow

    name = rt.name("timed")
    rt.workflows.append(name)
    leaf = workflow(name, timeout=10)(sleeper)

    @rt.workflow
    def top(step: Step) -> Any:
        child_id = yield from step.start(leaf)
        try:
            yield from step.wait(child_id)
        except ChildCancelledError as exc:
            return exc.reason
        return "no error"

    eid = start_workflow(top, timeout=timedelta(hours=1).total_seconds())
    rt.settle()
    child = get_execution(f"{eid}:0")
    assert child.deadline is not None
    assert child.deadline < get_execution(eid).deadline
    clock.advance(timedelta(seconds=11))
    try:
        rt.settle()
    finally:
        clock.reset()
    assert get_execution(f"{eid}:0").status == "cancelled"
    assert get_execution(eid).result == "DeadlineExceededError"


def test_deadline_exceeded_error_is_exported_and_revived() -> None:
    error = DeadlineExceededError("e", "2026-01-01T00:00:00+00:00")
    assert "passed its deadline" in str(error)


def test_bad_arguments_are_type_errors_before_anything_runs(rt: Runtime) -> None:
    child = rt.workflow(double)
    step = Step("x", "y")
    # A primitive checks its arguments when the workflow's `yield from` starts it.
    with pytest.raises(TypeError):
        next(step.start(42))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        next(step.start_many(child, "abc"))
    with pytest.raises(TypeError):
        next(step.start_many(child, [1]))
    with pytest.raises(TypeError):
        next(step.gather("abc"))
    with pytest.raises(ValueError):
        next(step.wait(""))
    with pytest.raises(TypeError):
        start_workflow(child, 1, timeout="soon")
    with pytest.raises(ValueError):
        start_workflow(child, 1, timeout=-1)
    assert not Execution.objects.exists()
    assert not WAKES


def _count_call(n: int) -> int:
    CALLS[f"n{n}"] = CALLS.get(f"n{n}", 0) + 1
    return n


@pytest.mark.slow
@pytest.mark.parametrize("client_kind", ["db"], indirect=True)
def test_ten_thousand_children_of_one_parent_each_run_exactly_once(rt: Runtime) -> None:
    n = 10_000
    CALLS.clear()

    def child_fn(step: Step, i: int) -> Any:
        return (yield from step.run(_count_call, i))

    child = rt.workflow(child_fn)

    @rt.workflow
    def parent(step: Step, n: int) -> Any:
        ids = yield from step.start_many(child, [[i] for i in range(n)])
        results = yield from step.gather(ids)
        return [len(results), sum(results)]

    eid = start_workflow(parent, n)
    rt.settle(timeout=600)
    execution = get_execution(eid)
    assert execution.status == "completed", execution.error
    assert execution.result == [n, sum(range(n))]
    assert {f"n{i}": 1 for i in range(n)} == CALLS
    runs = Execution.objects.filter(parent=eid).values_list("runs", flat=True)
    assert len(runs) == n and set(runs) == {1}
    # Woken once for all of them; its heap holds its own two steps, whatever n is.
    assert execution.runs == 2
    assert rt.steps(eid).keys() == {"0", "1"}


@pytest.mark.parametrize("client_kind", ["db"], indirect=True)
def test_children_ending_while_their_parent_registers_its_gather_wake_it(rt: Runtime) -> None:
    """Threads (each its own connection) run the children while the parent's run, in
    another thread, reaches its gather and registers: each round the parent is woken
    through a durable wake intent (none lost), runs at most three times, and gathers every
    result."""
    import threading

    from django.db import connection, connections

    from tests.polling import HANG_SECONDS, join_or_fail

    if connection.vendor != "postgresql":
        pytest.skip("row locks of PostgreSQL connections racing")
    n = 40
    barrier = threading.Barrier(3, timeout=HANG_SECONDS)

    def hold() -> None:
        barrier.wait()

    child = rt.workflow(double)

    @rt.workflow
    def parent(step: Step) -> Any:
        ids = yield from step.start_many(child, [[i] for i in range(n)])
        yield from step.run(hold)
        return (yield from step.gather(ids))

    errors: list[BaseException] = []

    def run(ids: list[str], wait: bool) -> None:
        try:
            if wait:
                barrier.wait()
            for id in ids:
                run_execution(id)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    for _ in range(4):
        eid = start_workflow(parent)
        children = [f"{eid}:0:{i}" for i in range(n)]
        threads = [
            threading.Thread(target=run, args=([eid], False)),
            threading.Thread(target=run, args=(children[: n // 2], True)),
            threading.Thread(target=run, args=(children[n // 2 :][::-1], True)),
        ]
        for thread in threads:
            thread.start()
        join_or_fail(*threads, what="the runs")
        assert not errors, errors
        assert all(get_execution(c).status == "completed" for c in children)
        rt.settle()  # the wakes recorded, and the intents the relay finds due
        execution = get_execution(eid)
        assert execution.status == "completed", (execution.status, execution.awaiting)
        assert execution.result == [i * 2 for i in range(n)]
        assert execution.runs <= 3
        assert not ChildWait.objects.filter(execution_id=eid).exists()
