"""Queues (``define_queue``): admission by concurrency, per key, rate and priority; the
status ``queued`` and its position; a finish, a failure or a cancel admitting the next one
in its own transaction; debounce and dedupe; pause and resume; typed errors for bad starts
with nothing stored; and the cost of a start into a queue with a free slot."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from yieldstar_django import clock
from yieldstar_django.models import Execution, QueueState, WakeIntent
from yieldstar_django.runtime import Step, cancel_execution, get_execution, retry_execution
from yieldstar_django.runtime.executions import run_execution, start_workflow
from yieldstar_django.runtime.queues import (
    Queue,
    define_queue,
    queue_position,
    queue_stats,
    unregister_queue,
)

from .conftest import Runtime

pytestmark = pytest.mark.parametrize("client_kind", ["db"])

_names = itertools.count()
RAN: list[Any] = []


@pytest.fixture
def queues() -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        unregister_queue(name)


def make_queue(names: list[str], **limits: Any) -> Queue:
    name = f"queue-{next(_names)}"
    names.append(name)
    return define_queue(name, **limits)


def recorder(rt: Runtime, *, fail: bool = False) -> Any:
    @rt.workflow
    def record(step: Step, value: Any) -> Any:
        RAN.append(value)
        if fail:
            raise RuntimeError("boom")
        return value
        yield  # a generator

    return record


def statuses(ids: list[str]) -> list[str]:
    by_id = dict(Execution.objects.filter(pk__in=ids).values_list("id", "status"))
    return [by_id[i] for i in ids]


def test_concurrency_bounds_started_executions_and_a_finish_admits_the_next(
    rt: Runtime, queues: list[str]
) -> None:
    """Five starts into a queue of concurrency 2: two start, three are ``queued`` (no run
    requested, positions 1, 2, 3); as the running ones finish the waiting ones start in
    arrival order, and all complete."""
    RAN.clear()
    wf = recorder(rt)
    q = make_queue(queues, concurrency=2)
    ids = [q.start(wf, i) for i in range(5)]
    assert statuses(ids) == ["pending", "pending", "queued", "queued", "queued"]
    assert [queue_position(i) for i in ids] == [None, None, 1, 2, 3]
    assert not WakeIntent.objects.filter(execution_id__in=ids[2:]).exists()
    stats = queue_stats(q.name)
    assert (stats.running, stats.waiting) == (2, 3)
    rt.settle()
    assert statuses(ids) == ["completed"] * 5
    assert RAN == [0, 1, 2, 3, 4]
    assert QueueState.objects.values_list("running", "waiting").get(pk=q.name) == (0, 0)


def test_higher_priority_starts_first_and_fifo_within_a_priority(
    rt: Runtime, queues: list[str]
) -> None:
    RAN.clear()
    wf = recorder(rt)
    q = make_queue(queues, concurrency=1)
    first = q.start(wf, "first")
    ids = [
        q.start(wf, "low-a", priority=0),
        q.start(wf, "high-a", priority=5),
        q.start(wf, "low-b", priority=0),
        q.start(wf, "high-b", priority=5),
    ]
    assert [queue_position(i) for i in ids] == [3, 1, 4, 2]
    rt.settle()
    assert statuses([first, *ids]) == ["completed"] * 5
    assert RAN == ["first", "high-a", "high-b", "low-a", "low-b"]


def test_per_key_bounds_the_executions_of_one_key(rt: Runtime, queues: list[str]) -> None:
    RAN.clear()
    wf = recorder(rt)
    q = make_queue(queues, concurrency=10, per_key=1)
    a1 = q.start(wf, "a1", key="a")
    a2 = q.start(wf, "a2", key="a")
    b1 = q.start(wf, "b1", key="b")
    assert statuses([a1, a2, b1]) == ["pending", "queued", "pending"]
    rt.settle()
    assert statuses([a1, a2, b1]) == ["completed"] * 3


def test_a_rate_bounds_starts_in_any_window(rt: Runtime, queues: list[str]) -> None:
    """rate=(2, 60): two start now, the third waits for the window (its timer), and
    starts once the clock passed 60 s after the first."""
    RAN.clear()
    wf = recorder(rt)
    q = make_queue(queues, rate=(2, 60))
    ids = [q.start(wf, i) for i in range(3)]
    assert statuses(ids) == ["pending", "pending", "queued"]
    rt.settle()
    assert statuses(ids) == ["completed", "completed", "queued"]
    assert queue_stats(q.name).rate_used == 2
    clock.advance(61)
    rt.settle()
    assert statuses(ids) == ["completed"] * 3


def test_a_failure_and_a_cancel_free_their_slots_and_a_retry_waits_again(
    rt: Runtime, queues: list[str]
) -> None:
    RAN.clear()
    bad = recorder(rt, fail=True)
    good = recorder(rt)
    q = make_queue(queues, concurrency=1)
    failing = q.start(bad, "bad")
    waiting = q.start(good, "w1")
    cancelled = q.start(good, "w2")
    assert cancel_execution(cancelled)
    assert QueueState.objects.values_list("running", "waiting").get(pk=q.name) == (1, 1)
    rt.settle()
    assert statuses([failing, waiting, cancelled]) == ["failed", "completed", "cancelled"]
    blocker = q.start(good, "blocker")
    assert retry_execution(failing)
    assert statuses([blocker, failing]) == ["pending", "queued"]
    running = q.start(good, "after")
    assert cancel_execution(blocker)  # an admitted one cancelled: the next one starts
    assert statuses([failing, running]) == ["pending", "queued"]
    rt.settle()
    assert get_execution(failing).status == "failed"
    assert get_execution(running).status == "completed"
    assert QueueState.objects.values_list("running", "waiting").get(pk=q.name) == (0, 0)


def test_debounce_collapses_a_burst_into_one_execution_with_the_last_arguments(
    rt: Runtime, queues: list[str]
) -> None:
    RAN.clear()
    wf = recorder(rt)
    q = make_queue(queues, concurrency=5)
    ids = {q.start(wf, i, key="doc", debounce=10) for i in range(50)}
    assert len(ids) == 1
    [eid] = ids
    rt.settle()
    assert get_execution(eid).status == "queued"
    clock.advance(11)
    rt.settle()
    assert get_execution(eid).result == 49
    assert RAN == [49]
    again = q.start(wf, "next", key="doc", debounce=10)
    assert again != eid


def test_debounce_max_caps_the_wait(rt: Runtime, queues: list[str]) -> None:
    RAN.clear()
    wf = recorder(rt)
    q = make_queue(queues)
    eid = q.start(wf, 0, key="k", debounce=10, debounce_max=15)
    clock.advance(8)
    assert q.start(wf, 1, key="k", debounce=10, debounce_max=15) == eid
    clock.advance(8)  # 16 s after the first start: past debounce_max
    rt.settle()
    assert get_execution(eid).result == 1


def test_dedupe_returns_the_live_execution_of_the_key(rt: Runtime, queues: list[str]) -> None:
    wf = recorder(rt)
    q = make_queue(queues, concurrency=1)
    first = q.start(wf, 1, key="k", dedupe=True)
    assert q.start(wf, 2, key="k", dedupe=True) == first
    other = q.start(wf, 3, key="j", dedupe=True)
    assert other != first
    rt.settle()
    assert q.start(wf, 4, key="k", dedupe=True) != first


def test_pause_holds_admissions_and_resume_admits(rt: Runtime, queues: list[str]) -> None:
    wf = recorder(rt)
    q = make_queue(queues, concurrency=3)
    assert q.pause()
    assert not q.pause()
    ids = [q.start(wf, i) for i in range(2)]
    assert statuses(ids) == ["queued", "queued"]
    assert queue_stats(q.name).paused
    assert q.resume()
    assert statuses(ids) == ["pending", "pending"]
    rt.settle()
    assert statuses(ids) == ["completed", "completed"]


def test_a_start_into_a_free_queue_costs_one_statement_more_than_a_plain_start(
    rt: Runtime, queues: list[str]
) -> None:
    wf = recorder(rt)
    q = make_queue(queues, concurrency=50)
    q.start(wf, "warm")  # the queue's row exists
    with CaptureQueriesContext(connection) as plain:
        start_workflow(wf, 1)
    with CaptureQueriesContext(connection) as queued:
        q.start(wf, 2)
    assert len(queued.captured_queries) <= len(plain.captured_queries) + 1, (
        [x["sql"] for x in plain.captured_queries],
        [x["sql"] for x in queued.captured_queries],
    )


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"priority": "1"}, TypeError),
        ({"priority": True}, TypeError),
        ({"debounce": 5}, ValueError),  # no key
        ({"dedupe": True}, ValueError),  # no key
        ({"key": "k", "debounce": -1}, ValueError),
        ({"key": "k", "debounce": 5, "debounce_max": 1}, ValueError),
        ({"key": "k", "dedupe": "yes"}, TypeError),
        ({"key": ""}, ValueError),
        ({"key": "a\x00"}, ValueError),
    ],
)
def test_bad_starts_are_typed_errors_and_store_nothing(
    rt: Runtime, queues: list[str], kwargs: dict[str, Any], error: type[Exception]
) -> None:
    wf = recorder(rt)
    q = make_queue(queues, concurrency=1)
    with pytest.raises(error):
        q.start(wf, 1, **kwargs)
    assert not Execution.objects.exists()
    assert not QueueState.objects.exists()


@pytest.mark.parametrize(
    "limits",
    [{"concurrency": 0}, {"per_key": -1}, {"rate": (0, 1)}, {"rate": (1, 0)}, {"rate": 5}],
)
def test_bad_limits_are_value_errors(limits: dict[str, Any], client_kind: str) -> None:
    with pytest.raises(ValueError):
        define_queue("bad-limits", **limits)


def test_a_different_definition_under_a_taken_name_is_refused(
    queues: list[str], client_kind: str
) -> None:
    q = make_queue(queues, concurrency=1)
    assert define_queue(q.name, concurrency=1) == q
    with pytest.raises(ImproperlyConfigured):
        define_queue(q.name, concurrency=2)


def test_a_start_rolled_back_with_its_transaction_takes_no_slot(
    rt: Runtime, queues: list[str]
) -> None:
    wf = recorder(rt)
    q = make_queue(queues, concurrency=1)
    q.start(wf, "warm")
    with pytest.raises(RuntimeError), transaction.atomic():
        q.start(wf, "gone")
        raise RuntimeError
    assert QueueState.objects.values_list("running", "waiting").get(pk=q.name) == (1, 0)


def test_a_finish_wakes_exactly_the_next_one_not_every_waiter(
    rt: Runtime, queues: list[str]
) -> None:
    """One running, ten queued: the finish of the running one requests the run of the
    next one alone (one wake, one intent), in the transaction that records the finish."""
    from yieldstar_django.runtime.executions import run_execution

    from .conftest import WAKES

    wf = recorder(rt)
    q = make_queue(queues, concurrency=1)
    ids = [q.start(wf, i) for i in range(11)]
    WAKES.clear()
    assert not WakeIntent.objects.filter(execution_id__in=ids[1:]).exists()
    assert str(run_execution(ids[0])) == "finished"
    assert [w.execution_id for w in WAKES] == [ids[1]]
    intents = WakeIntent.objects.filter(execution_id__in=ids[1:])
    assert list(intents.values_list("execution_id", flat=True)) == [ids[1]]
    assert statuses(ids) == ["completed", "pending"] + ["queued"] * 9


def test_children_start_through_a_queue_and_the_parent_gathers_them(
    rt: Runtime, queues: list[str]
) -> None:
    """``step.start(..., queue=)``: the children wait for the queue's slots (two at a
    time), start in order, and the parent gathers every result."""
    RAN.clear()
    child = recorder(rt)
    q = make_queue(queues, concurrency=2)

    @rt.workflow
    def parent(step: Step, n: int) -> Any:
        ids = []
        for i in range(n):
            ids.append((yield from step.start(child, i, queue=q, queue_key="k", priority=i)))
        return (yield from step.gather(ids))

    eid = start_workflow(parent, 5)
    run_execution(eid)  # the parent's first run starts the five children into the queue
    children = [f"{eid}:{i}" for i in range(5)]
    assert statuses(children) == ["pending", "pending", "queued", "queued", "queued"]
    assert set(Execution.objects.filter(pk__in=children).values_list("parent", flat=True)) == {eid}
    assert queue_stats(q.name).running == 2
    rt.settle()
    assert get_execution(eid).result == [0, 1, 2, 3, 4]
    assert sorted(RAN) == [0, 1, 2, 3, 4]
    assert QueueState.objects.values_list("running", "waiting").get(pk=q.name) == (0, 0)


def test_cancelling_a_parent_counts_its_queued_and_running_children_out(
    rt: Runtime, queues: list[str]
) -> None:
    """The tree's cancel reaches children in a queue: their slots and places are freed,
    and the queue admits what else waits."""
    RAN.clear()
    child = recorder(rt)
    q = make_queue(queues, concurrency=1)

    @rt.workflow
    def parent(step: Step) -> Any:
        ids = []
        for i in range(3):
            ids.append((yield from step.start(child, i, queue=q)))
        return (yield from step.gather(ids))

    eid = start_workflow(parent)
    run_execution(eid)
    outsider = q.start(child, "outsider")
    assert QueueState.objects.values_list("running", "waiting").get(pk=q.name) == (1, 3)
    assert cancel_execution(eid)
    assert statuses([f"{eid}:{i}" for i in range(3)]) == ["cancelled"] * 3
    assert statuses([outsider]) == ["pending"]  # admitted by the cancel
    assert QueueState.objects.values_list("running", "waiting").get(pk=q.name) == (1, 0)
    rt.settle()
    assert statuses([outsider]) == ["completed"]
    assert QueueState.objects.values_list("running", "waiting").get(pk=q.name) == (0, 0)


def test_a_child_start_names_a_queue_or_is_refused(rt: Runtime, queues: list[str]) -> None:
    child = recorder(rt)

    @rt.workflow
    def parent(step: Step) -> Any:
        return (yield from step.start(child, 1, queue=3.5))

    eid = start_workflow(parent)
    rt.settle()
    execution = get_execution(eid)
    assert execution.status == "failed"
    assert "queue" in str(execution.error)
    assert not Execution.objects.filter(parent=eid).exists()


def test_a_queued_start_has_its_workflows_timeout_and_is_cancelled_at_it(
    rt: Runtime, queues: list[str]
) -> None:
    """``@workflow(timeout=)`` gives a start through a queue its deadline, counted from the
    start: one still queued then is cancelled (``DeadlineExceededError``) and leaves the
    queue; the one running keeps its slot."""
    from datetime import timedelta

    from yieldstar_django.runtime import workflow

    def nap(step: Step) -> Any:
        yield from step.sleep(3600)

    blocker = rt.workflow(nap)
    name = rt.name("timed")
    rt.workflows.append(name)
    timed = workflow(name, timeout=10)(nap)
    q = make_queue(queues, concurrency=1)
    first = q.start(blocker)
    second = q.start(timed)
    assert statuses([first, second]) == ["pending", "queued"]
    assert get_execution(first).deadline is None
    assert get_execution(second).deadline is not None
    rt.settle()
    clock.advance(timedelta(seconds=11))
    try:
        rt.settle()
    finally:
        clock.reset()
    assert statuses([first, second]) == ["sleeping", "cancelled"]
    error = get_execution(second).error
    assert error is not None and error["type"] == "DeadlineExceededError"
    assert QueueState.objects.values_list("running", "waiting").get(pk=q.name) == (1, 0)
