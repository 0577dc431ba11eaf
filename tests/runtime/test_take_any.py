"""``step.take_any``: one claim out of several stores, a timeout, replay, and races."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import connection, connections, transaction
from django.test import override_settings

from tests.connections import await_lock_wait
from tests.polling import HANG_SECONDS, join_or_fail
from yieldstar_django.core.definition import StoreDefinition
from yieldstar_django.models import ExecutionStep, Waiter
from yieldstar_django.runtime import (
    Step,
    executions as executions_module,
    get_execution,
    start_workflow,
)

from .conftest import WAKES, Runtime


def first(state: Any) -> Any:
    return state["items"][0] if state["items"] else None


def pop_first(draft: Any, selected: Any) -> None:
    draft["items"].pop(0)


def push(rt: Runtime, store: StoreDefinition, id: str, item: Any) -> None:
    rt.client.update_store(store, id, updater=lambda d: d["items"].append(item))


def items(rt: Runtime, store: StoreDefinition, id: str) -> list[Any]:
    return list(rt.client.get_store(store, id).state["items"])


def test_returns_the_choice_that_matched_and_drops_the_other_waiters(rt: Runtime) -> None:
    replies, cancels = rt.define(), rt.define()

    @rt.workflow
    def wf(step: Step) -> Any:
        index, selected = yield from step.take_any(
            [(replies, "o1", first, pop_first), (cancels, "o1", first, pop_first)]
        )
        yield from step.sleep(0.01)  # a replay after the take must see the same pair
        return [index, selected]

    eid = start_workflow(wf)
    rt.pump()
    assert get_execution(eid).status == "waiting"
    if rt.client.__class__.__name__ != "MemoryStoreClient":
        assert Waiter.objects.filter(execution_id=eid).count() == 2
    push(rt, cancels, "o1", "stop")
    rt.settle(lambda: get_execution(eid).is_finished)
    assert get_execution(eid).result == [1, "stop"]
    assert items(rt, cancels, "o1") == []
    if rt.client.__class__.__name__ != "MemoryStoreClient":
        assert not Waiter.objects.filter(execution_id=eid).exists()
    assert rt.steps(eid)["0"].kind == "take_any"


def test_timeout_returns_none_none_and_claims_nothing(rt: Runtime) -> None:
    replies = rt.define()

    @rt.workflow
    def wf(step: Step) -> Any:
        pair = yield from step.take_any([(replies, "o2", first, pop_first)], timeout=0.05)
        return list(pair)

    eid = start_workflow(wf)
    rt.settle(lambda: get_execution(eid).is_finished)
    assert get_execution(eid).result == [None, None]
    push(rt, replies, "o2", "late")
    rt.settle()
    assert items(rt, replies, "o2") == ["late"]  # the late reply is still there


def test_two_stores_changed_in_one_transaction_are_claimed_once(rt: Runtime) -> None:
    a, b = rt.define(), rt.define()

    @rt.workflow
    def wf(step: Step) -> Any:
        return list(
            (yield from step.take_any([(a, "x", first, pop_first), (b, "x", first, pop_first)]))
        )

    eid = start_workflow(wf)
    rt.pump()
    with transaction.atomic():
        push(rt, a, "x", "from-a")
        push(rt, b, "x", "from-b")
    rt.settle(lambda: get_execution(eid).is_finished)
    assert get_execution(eid).result == [0, "from-a"]
    assert items(rt, a, "x") == [] and items(rt, b, "x") == ["from-b"]


def test_two_choices_on_one_store_wait_separately(rt: Runtime) -> None:
    q = rt.define(initial=lambda id: {"items": [], "urgent": []})

    def urgent(state: Any) -> Any:
        return state["urgent"][0] if state["urgent"] else None

    @rt.workflow
    def wf(step: Step) -> Any:
        return list((yield from step.take_any([(q, "q", first, pop_first), (q, "q", urgent)])))

    eid = start_workflow(wf)
    rt.pump()
    rt.client.update_store(q, "q", updater=lambda d: d["urgent"].append("now"))
    rt.settle(lambda: get_execution(eid).is_finished)
    assert get_execution(eid).result == [1, "now"]


def test_bad_choices_are_type_errors() -> None:
    step = Step("e", "w")
    for bad in ([], "abc", [("not a store", "id", first)], [(1,)]):
        with pytest.raises(TypeError):
            next(step.take_any(bad))  # type: ignore[arg-type]


def test_racing_runs_and_writers_claim_each_item_once(rt: Runtime) -> None:
    """Several threads (own PostgreSQL connections) run the executions while others add
    items to both stores at once: every execution claims exactly one item, and no item
    is claimed twice or lost."""
    if rt.client.__class__.__name__ == "MemoryStoreClient" or connection.vendor != "postgresql":
        pytest.skip("needs the database client on PostgreSQL")
    a, b = rt.define(), rt.define()
    executions = 6

    @rt.workflow
    def wf(step: Step) -> Any:
        return list(
            (yield from step.take_any([(a, "r", first, pop_first), (b, "r", first, pop_first)]))
        )

    eids = [start_workflow(wf) for _ in range(executions)]
    rt.pump()
    barrier = threading.Barrier(4, timeout=HANG_SECONDS)
    errors: list[BaseException] = []

    def writer(tag: str) -> None:
        try:
            barrier.wait()
            for n in range(executions):
                with transaction.atomic():
                    push(rt, a, "r", f"{tag}-a{n}")
                    push(rt, b, "r", f"{tag}-b{n}")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    def runner() -> None:
        try:
            barrier.wait()
            for _ in range(400):
                pending = [e for e in eids if not get_execution(e).is_finished]
                if not pending:
                    return
                for eid in pending:
                    executions_module.run_execution(eid)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer, args=(t,)) for t in ("w1", "w2")]
    threads += [threading.Thread(target=runner) for _ in range(2)]
    for thread in threads:
        thread.start()
    join_or_fail(*threads, what="the threads")
    assert not errors, errors
    results = [get_execution(e).result for e in eids]
    assert all(get_execution(e).status == "completed" for e in eids), results
    claimed = [selected for _, selected in results]  # type: ignore[misc]
    assert len(set(claimed)) == executions
    left = items(rt, a, "r") + items(rt, b, "r")
    assert sorted(left + claimed) == sorted(
        f"{t}-{s}{n}" for t in ("w1", "w2") for s in "ab" for n in range(executions)
    )


def go(state: Any) -> Any:
    return "go" if "go" in state["items"] else None


def remove(draft: Any, selected: Any) -> None:
    draft["items"].remove(selected)


def waiting_on_two(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch, path: str, timeout: float | None = None
) -> tuple[StoreDefinition, StoreDefinition, str]:
    """Two stores holding a "noise" item each, and a started (not yet run) execution taking
    "go" from either, on the database client through ``path`` ("function" or
    "statements"); skips unless that client is on PostgreSQL (row locks)."""
    if rt.client.__class__.__name__ == "MemoryStoreClient" or connection.vendor != "postgresql":
        pytest.skip("needs the database client on PostgreSQL (row locks)")
    monkeypatch.setattr(rt.client, "_use_functions", path == "function")
    a, b = rt.define(), rt.define()

    @rt.workflow
    def wf(step: Step) -> Any:
        choices = [(a, "d", go, remove), (b, "d", go, remove)]
        return list((yield from step.take_any(choices, timeout=timeout)))

    push(rt, a, "d", "noise")
    push(rt, b, "d", "noise")
    return a, b, start_workflow(wf)


def start_thread(
    work: Callable[[], None], errors: list[BaseException], pid: list[int] | None = None
) -> threading.Thread:
    """Run ``work`` in a thread (its own connection), noting its backend's id in ``pid``
    first and what it raises in ``errors``."""

    def body() -> None:
        try:
            if pid is not None:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_backend_pid()")
                    pid.append(cursor.fetchone()[0])
            work()
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=body)
    thread.start()
    return thread


@pytest.mark.parametrize("path", ["function", "statements"])
@pytest.mark.parametrize("which", ["first", "woken"])
def test_registering_choices_never_deadlocks_with_a_writer_of_those_stores(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch, which: str, path: str
) -> None:
    """A run that misses both choices registers them in one transaction (the first run
    with the pending row and the timeout's timer), which share-locks each store's row in
    turn. Holding the first, it meets a transaction that has changed the second and now
    waits for the first: the registration gives way (its transaction rolls back, and the
    pending row, the timer and each choice are written again, each choice alone), so the
    writer commits without a deadlock error, and the item it wrote is claimed."""
    from yieldstar_django.runtime import store_steps

    a, b, eid = waiting_on_two(rt, monkeypatch, path, timeout=60 if which == "first" else None)
    if which == "woken":
        rt.pump()
        push(rt, a, "d", "noise")  # wakes the execution; its run matches neither choice
        assert get_execution(eid).status == "waiting"
    WAKES.clear()  # the run below is made here

    holding, release = threading.Event(), threading.Event()
    register = store_steps.wait_for

    def paused(engine: Any, key: str, *args: Any) -> None:
        register(engine, key, *args)
        if key.endswith("#0") and not holding.is_set():
            holding.set()  # choice 0's store row is share-locked until the commit
            assert release.wait(HANG_SECONDS), "the test never released the registration"

    monkeypatch.setattr(store_steps, "wait_for", paused)
    errors: list[BaseException] = []
    writer_pid: list[int] = []

    def run() -> None:
        try:
            executions_module.run_execution(eid)
        finally:
            holding.set()

    def write() -> None:
        with transaction.atomic():
            push(rt, b, "d", "noise")  # b's row stays locked until this commits
            push(rt, a, "d", "go")  # waits for the registration's share lock on a

    runner = start_thread(run, errors)
    assert holding.wait(HANG_SECONDS)
    writer = start_thread(write, errors, writer_pid)
    await_lock_wait(writer_pid, "the writer")
    release.set()
    join_or_fail(runner, what="the runner")
    join_or_fail(writer, what="the writer")
    assert not errors, errors
    rt.settle(lambda: get_execution(eid).is_finished)
    assert get_execution(eid).result == [0, "go"]
    assert items(rt, a, "d") == ["noise"] * (2 if which == "woken" else 1)
    assert items(rt, b, "d") == ["noise", "noise"]
    if which == "first":
        assert rt.steps(eid)["0"].wake_at is not None, "the pending row kept its timeout"


@pytest.mark.parametrize("path", ["function", "statements"])
def test_a_claim_never_deadlocks_with_a_writer_that_woke_another_choice(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """A run claims from the second choice's store while a transaction has changed the
    first (waking that choice's waiter, whose row it holds until it commits) and then
    changes the second. The claim's commit removes the step's waiters; it takes them
    before the store's row, so it waits for the writer without holding what the writer
    waits for: neither is cancelled by a deadlock check, and the claim goes through."""
    x, y, eid = waiting_on_two(rt, monkeypatch, path)
    rt.pump()
    push(rt, y, "d", "go")  # wakes the execution: choice 1 matches
    WAKES.clear()  # the run below is made here
    marked, resume = threading.Event(), threading.Event()
    errors: list[BaseException] = []
    runner_pid: list[int] = []

    def write() -> None:
        try:
            with transaction.atomic():
                push(rt, x, "d", "noise")  # wakes choice 0's waiter: its row stays locked
                marked.set()
                assert resume.wait(HANG_SECONDS), "the test never resumed the writer"
                push(rt, y, "d", "noise")  # waits for the claim's lock on y, if it has one
        finally:
            marked.set()

    writer = start_thread(write, errors)
    assert marked.wait(HANG_SECONDS)
    runner = start_thread(lambda: executions_module.run_execution(eid), errors, runner_pid)
    await_lock_wait(runner_pid, "the claim")
    resume.set()
    join_or_fail(writer, what="the writer")
    join_or_fail(runner, what="the runner")
    assert not errors, errors
    rt.settle(lambda: get_execution(eid).is_finished)
    assert get_execution(eid).result == [1, "go"]
    assert items(rt, y, "d") == ["noise", "noise"]
    assert not Waiter.objects.filter(execution_id=eid).exists()


def long_choices(store: StoreDefinition, last: str) -> list[Any]:
    """Three choices on ids of 200 characters (store ids can be 255): their fingerprint
    text is past 512 characters, and ``last`` (the third id's tail) is beyond that."""
    return [(store, c * 200, first, pop_first) for c in "ab"] + [
        (store, "c" * 190 + last, first, pop_first)
    ]


def test_a_change_of_the_choices_past_512_characters_is_non_determinism(rt: Runtime) -> None:
    """The fingerprint of a ``take_any`` names every choice: changing the third of three
    long ids (past the 512 characters of the fingerprint column) fails the replay with
    ``NonDeterminismError`` instead of replaying the recorded index against other choices.
    Failed before: the fingerprint was the text cut at 512 characters, so the change went
    unnoticed and the execution completed."""
    q = rt.define(initial=lambda id: {"items": ["x"]})
    version = {"last": "old-id-tail"}

    @rt.workflow
    def wf(step: Step) -> Any:
        pair = yield from step.take_any(long_choices(q, version["last"]))
        yield from step.sleep(0.01)
        return list(pair)

    message = rt.nondeterminism_after(wf, lambda: version.update(last="new-id-tail"))
    assert "take_any" in message


def test_a_step_keyed_like_a_choice_of_a_take_any_is_a_step_key_error(rt: Runtime) -> None:
    """Choice ``i`` of a ``take_any`` keyed "x" records its claim in the ledger under
    "x#i": a ``take`` keyed "x#0" on the same store would read that entry back as its own
    and return the item the ``take_any`` claimed, claiming nothing. The execution fails
    with ``StepKeyError`` at the take instead. Failed before: it completed with the item
    twice, ``["A", "A"]``."""
    q = rt.define(initial=lambda id: {"items": ["A", "B"]})

    @rt.workflow
    def wf(step: Step) -> Any:
        _, a = yield from step.take_any([(q, "q", first, pop_first)], key="x")
        b = yield from step.take(q, "q", first, pop_first, key="x#0")
        return [a, b]

    eid = start_workflow(wf)
    rt.settle(lambda: get_execution(eid).is_finished)
    error = get_execution(eid).error
    assert error is not None and error["type"] == "StepKeyError", get_execution(eid).result
    assert "x#0" in error["message"]
    assert items(rt, q, "q") == ["B"]


def test_choices_that_read_alike_are_told_apart_on_replay(rt: Runtime) -> None:
    """Store names and ids may hold " | " (the separator of the fingerprint's text) or a
    name "/": one choice on the id "a | <store>/b" reads like two choices on "a" and "b".
    Replaying a step recorded with the one under code that makes the two fails with
    ``NonDeterminismError``. Failed before: both had the same fingerprint, and the recorded
    index 0 was replayed as the choice of "a"."""
    q = rt.define(initial=lambda id: {"items": ["x"]})
    version = {"v": 1}

    @rt.workflow
    def wf(step: Step) -> Any:
        if version["v"] == 1:
            choices = [(q, f"a | {q.name}/b", first, pop_first)]
        else:
            choices = [(q, "a", first, pop_first), (q, "b", first, pop_first)]
        pair = yield from step.take_any(choices)
        yield from step.sleep(0.01)
        return list(pair)

    rt.nondeterminism_after(wf, lambda: version.update(v=2))


def test_a_take_any_with_a_key_of_255_characters_claims(rt: Runtime) -> None:
    """Choice ``i``'s ledger and waiter key is derived from the step's key and must fit
    the 255 characters a step key may have. Failed before (database client): it was the
    key plus "#0", which the ledger refuses, and the step failed with ``ValueError``."""
    q = rt.define(initial=lambda id: {"items": []})
    r = rt.define(initial=lambda id: {"items": []})

    @rt.workflow
    def wf(step: Step) -> Any:
        choices = [(q, "q", first, pop_first), (r, "r", first, pop_first)]
        return list((yield from step.take_any(choices, key="k" * 255)))

    eid = start_workflow(wf)
    rt.pump()
    assert get_execution(eid).status == "waiting", get_execution(eid).error
    push(rt, r, "r", "B")
    rt.settle(lambda: get_execution(eid).is_finished)
    assert get_execution(eid).result == [1, "B"], get_execution(eid).error
    assert items(rt, r, "r") == []


def test_bad_arguments_are_refused_at_the_call(rt: Runtime) -> None:
    """Bad arguments to ``take_any`` and to a leased ``take`` raise ``TypeError`` or
    ``ValueError`` at the call, before the step is made: whatever the stores hold, nothing
    is claimed or written. Failed before for store ids the tables cannot hold (longer
    than 255 characters, or holding "\\x00") in a choice after the first: the step was
    made, the first choice claimed what it matched, and the bad id failed only when a run
    reached it."""
    from .test_claim_leases import queue

    q = rt.define(initial=lambda id: {"items": ["A"]})
    leased = queue(rt, ["job-1"])
    step = Step("e", "w")
    ok = (q, "q", first, pop_first)
    bad_choices: list[Any] = [
        [],
        (),
        "abc",
        iter([ok]),
        [ok, (q, "x" * 256, first)],
        [ok, (q, "a\x00b", first)],
        [ok, (q, 5, first)],
        [ok, ("not a store", "q", first)],
        [ok, (q, "q", "not callable")],
        [ok, (q, "q", first, "not callable")],
        [ok, (q, "q")],
    ]
    for choices in bad_choices:
        with pytest.raises((TypeError, ValueError)):
            next(step.take_any(choices))
    for timeout in (-1, float("nan"), float("inf"), 1e300, True, "5"):
        with pytest.raises((TypeError, ValueError)):
            next(step.take_any([ok], timeout=timeout))  # type: ignore[arg-type]
    for lease in (-1, 0, float("nan"), float("inf"), 1e300, True, "5"):
        with pytest.raises((TypeError, ValueError)):
            next(step.take(leased, "q", first, pop_first, lease=lease))  # type: ignore[arg-type]
    for id in ("x" * 256, "a\x00b"):
        with pytest.raises(ValueError):
            next(step.take(leased, id, first, pop_first, lease=5))

    @rt.workflow
    def wf(step: Step) -> Any:
        try:
            yield from step.take_any([ok, (q, "x" * 256, first)])
        except ValueError as exc:
            return str(exc)
        return "made"

    eid = start_workflow(wf)
    rt.settle(lambda: get_execution(eid).is_finished)
    assert "store id" in str(get_execution(eid).result)
    assert not ExecutionStep.objects.filter(execution_id=eid).exists()
    assert items(rt, q, "q") == ["A"]


def test_a_timeout_racing_an_item_s_arrival_has_one_outcome(rt: Runtime) -> None:
    """Executions whose ``take_any`` times out just as a writer (its own PostgreSQL
    connection) adds their item, run over and over by two runner threads: each ends with
    exactly one outcome, the item claimed once (``[0, item]``, gone from the store) or the
    timeout (``[None, None]``, the item still there); none is lost or claimed twice."""
    if rt.client.__class__.__name__ == "MemoryStoreClient" or connection.vendor != "postgresql":
        pytest.skip("needs the database client on PostgreSQL")
    from yieldstar_django.wakes import relay_once

    a = rt.define()
    rounds = 8

    @rt.workflow
    def wf(step: Step, id: str) -> Any:
        return list((yield from step.take_any([(a, id, first, pop_first)], timeout=0.3)))

    eids = {f"t{n}": start_workflow(wf, f"t{n}") for n in range(rounds)}
    rt.pump()
    assert all(get_execution(e).status == "waiting" for e in eids.values())
    barrier = threading.Barrier(3, timeout=HANG_SECONDS)
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            barrier.wait()
            time.sleep(0.22)
            for id in eids:  # around the due time, one every 20 ms
                push(rt, a, id, f"item-{id}")
                time.sleep(0.02)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    def runner() -> None:
        try:
            barrier.wait()
            deadline = time.monotonic() + HANG_SECONDS

            while time.monotonic() < deadline:
                relay_once()
                pending = [e for e in eids.values() if not get_execution(e).is_finished]
                if not pending:
                    return
                for eid in pending:
                    executions_module.run_execution(eid)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=runner) for _ in "ab"]
    for thread in threads:
        thread.start()
    join_or_fail(*threads, what="the threads")
    assert not errors, errors
    for id, eid in eids.items():
        execution = get_execution(eid)
        assert execution.status == "completed", (id, execution.status, execution.error)
        left = items(rt, a, id)
        if execution.result == [None, None]:
            assert left == [f"item-{id}"], (id, left)
        else:
            assert execution.result == [0, f"item-{id}"] and left == [], (id, left)
        assert not Waiter.objects.filter(execution_id=eid).exists()


def test_a_run_inside_the_caller_s_transaction_leaves_its_lock_timeout_alone(
    rt: Runtime,
) -> None:
    """Registering several choices sets a short ``lock_timeout`` (to give way to a writer)
    with ``SET LOCAL``: in a transaction of the caller's (``run_execution`` inside
    ``transaction.atomic``, a ``TestCase``), that lasted until the caller's commit, so every
    later statement of it (the caller's own, the run's next store commits) failed after
    50 ms of waiting for a lock instead of waiting as the caller had set."""
    if rt.client.__class__.__name__ == "MemoryStoreClient" or connection.vendor != "postgresql":
        pytest.skip("needs the database client on PostgreSQL (SET LOCAL lock_timeout)")
    a, b = rt.define(), rt.define()

    @rt.workflow
    def wf(step: Step) -> Any:
        return list(
            (yield from step.take_any([(a, "x", first, pop_first), (b, "x", first, pop_first)]))
        )

    def lock_timeout() -> str:
        with connection.cursor() as cursor:
            cursor.execute("SHOW lock_timeout")
            return str(cursor.fetchone()[0])

    session = lock_timeout()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL lock_timeout = '7s'")
        eid = start_workflow(wf)
        assert executions_module.run_execution(eid) == "suspended"
        # both choices registered in one transaction: the path that gives way
        assert Waiter.objects.filter(execution_id=eid).count() == 2
        assert lock_timeout() == "7s"
    assert lock_timeout() == session


@pytest.mark.parametrize("path", ["function", "statements"])
def test_a_queued_claim_never_deadlocks_with_a_writer_that_woke_another_choice(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """As above, but the claim lost a race (``CAS_QUEUE_AFTER`` = 1), so its next attempt
    is made in the store queue, whose transaction holds the claimed store's row. While it
    does, a transaction changes the first choice's store (waking that choice's waiter) and
    then asks for the claimed store's row. The queued claim then removes the step's
    waiters: it must have locked them before the store's row, as every other claim does,
    else it waits for the writer's waiter row while the writer waits for its store row,
    and PostgreSQL cancels one of them (``deadlock detected``)."""
    x, y, eid = waiting_on_two(rt, monkeypatch, path)
    rt.pump()
    push(rt, y, "d", "go")  # wakes the execution: choice 1 matches
    WAKES.clear()  # the run below is made here
    queued, resume = threading.Event(), threading.Event()
    errors: list[BaseException] = []
    writer_pid: list[int] = []
    commits = 0
    commit = rt.client.commit_mutation

    def racing(mutation: Any) -> Any:
        nonlocal commits
        if mutation.step_id is not None and mutation.definition is y:  # the claim's commit
            commits += 1
            if commits == 1:  # a write slips in first: the claim loses, then queues
                bump = start_thread(lambda: push(rt, y, "d", "bump"), errors)
                join_or_fail(bump, what="the write that slips in first")
            else:  # made in the queue, which holds y's row until it ends
                queued.set()
                assert resume.wait(HANG_SECONDS), "the test never resumed the claim"
        return commit(mutation)

    monkeypatch.setattr(rt.client, "commit_mutation", racing)

    def short_deadlock_timeout() -> None:  # so a deadlock is found at once (superuser)
        with connection.cursor() as cursor:
            cursor.execute("SET deadlock_timeout = '50ms'")

    def run() -> None:
        short_deadlock_timeout()
        try:
            executions_module.run_execution(eid)
        finally:
            queued.set()

    def write() -> None:
        short_deadlock_timeout()
        with transaction.atomic():
            push(rt, x, "d", "noise")  # wakes choice 0's waiter: its row stays locked
            push(rt, y, "d", "noise")  # waits for the queued claim's lock on y

    yieldstar = {**django_settings.YIELDSTAR, "CAS_QUEUE_AFTER": 1}
    with override_settings(YIELDSTAR=yieldstar):
        runner = start_thread(run, errors)
        assert queued.wait(HANG_SECONDS)
        writer = start_thread(write, errors, writer_pid)
        await_lock_wait(writer_pid, "the writer")
        resume.set()
        join_or_fail(runner, what="the runner")
        join_or_fail(writer, what="the writer")
    assert not errors, errors
    assert commits == 2, "the claim lost one race, then committed in the queue"
    rt.settle(lambda: get_execution(eid).is_finished)
    assert get_execution(eid).result == [1, "go"]
    assert items(rt, y, "d") == ["noise", "bump", "noise"]
    assert not Waiter.objects.filter(execution_id=eid).exists()
