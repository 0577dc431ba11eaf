"""Replay rules: non-determinism, step keys, misuse; leases: one run at a time, no lost
wake, takeover of an expired lease, a lost lease records nothing."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from tests.polling import join_or_fail, wait_until
from yieldstar_django.models import Execution, ExecutionStep, WakeIntent
from yieldstar_django.runtime import Step, get_execution, start_workflow
from yieldstar_django.runtime.executions import ResumeResult, run_execution

from .conftest import Runtime


def test_changed_step_kind_fails_with_non_determinism_error(rt: Runtime) -> None:
    version = {"v": 1}

    def one() -> int:
        return 1

    @rt.workflow
    def wf(step: Step) -> Any:
        if version["v"] == 1:
            yield from step.run(one)
        else:
            yield from step.sleep(1)
        yield from step.sleep(0.01, key="pause")
        return "done"

    eid = start_workflow(wf)
    rt.pump()
    assert get_execution(eid).status == "sleeping"
    version["v"] = 2  # "deploy" changed code while the execution sleeps
    rt.settle(lambda: get_execution(eid).is_finished)
    execution = get_execution(eid)
    assert execution.status == "failed"
    assert execution.error is not None
    assert execution.error["type"] == "NonDeterminismError"
    assert "step '0'" in execution.error["message"]
    assert "run(" in execution.error["message"] and "sleep" in execution.error["message"]


def test_changed_run_function_is_non_determinism(rt: Runtime) -> None:
    version = {"v": 1}

    def pay() -> str:
        return "paid"

    def refund() -> str:
        return "refunded"

    @rt.workflow
    def wf(step: Step) -> Any:
        yield from step.run(pay if version["v"] == 1 else refund)
        yield from step.sleep(0.01)

    message = rt.nondeterminism_after(wf, lambda: version.update(v=2))
    assert "pay" in message and "refund" in message


def test_duplicate_step_key_fails(rt: Runtime) -> None:
    @rt.workflow
    def wf(step: Step) -> Any:
        yield from step.run(lambda: 1, key="same")
        yield from step.run(lambda: 2, key="same")

    eid = start_workflow(wf)
    rt.settle()
    error = get_execution(eid).error
    assert error is not None and error["type"] == "StepKeyError"


def test_yielding_without_from_fails_clearly(rt: Runtime) -> None:
    @rt.workflow
    def wf(step: Step) -> Any:
        yield step.run(lambda: 1)  # type: ignore[misc]

    eid = start_workflow(wf)
    rt.settle()
    error = get_execution(eid).error
    assert error is not None and error["type"] == "builtins:TypeError"
    assert "yield from step.run" in error["message"]


class NoRepr:
    def __repr__(self) -> str:
        raise RuntimeError("repr() of this object fails")


def test_yielding_a_non_step_whose_repr_raises_fails_clearly(rt: Runtime) -> None:
    """The message naming what was yielded used ``repr()``: one that raises crashed the
    run, and the execution stayed ``running``, run again at every lease timer."""

    @rt.workflow
    def wf(step: Step) -> Any:
        yield NoRepr()

    eid = start_workflow(wf)
    rt.settle(lambda: get_execution(eid).is_finished)
    error = get_execution(eid).error
    assert error is not None and error["type"] == "builtins:TypeError"
    assert "NoRepr" in error["message"] and "yield from step.run" in error["message"]


def test_wake_during_a_run_runs_it_again(rt: Runtime) -> None:
    """A resume that finds the lease held flags the wake; the holder runs again."""
    store = rt.define()
    nested: list[str] = []

    def resume_myself(execution_id: str) -> None:
        nested.append(str(run_execution(execution_id)))

    @rt.workflow
    def wf(step: Step) -> Any:
        yield from step.run(resume_myself, step.execution_id)
        return (yield from step.take(store, "q", lambda s: s["items"] or None))

    eid = start_workflow(wf)
    rt.pump()
    assert nested == [ResumeResult.BUSY]
    execution = get_execution(eid)
    assert execution.status == "waiting"
    assert execution.runs == 1  # one lease taken ...
    assert execution.wake_pending is False
    # ... and the flagged wake made the holder replay once more before releasing it.
    assert rt.resumes[0] == (eid, "suspended")


def start_leased(rt: Runtime, owner: str, expires_in: timedelta, **fields: Any) -> str:
    """Starts a workflow of one step returning ``"done"`` and gives its lease to ``owner``,
    expiring ``expires_in`` from now (``fields``: more columns set alike); returns its id."""

    @rt.workflow
    def wf(step: Step) -> Any:
        return (yield from step.run(lambda: "done"))

    eid = start_workflow(wf)
    Execution.objects.filter(pk=eid).update(
        lease_owner=owner, lease_expires_at=timezone.now() + expires_in, **fields
    )
    return eid


def test_expired_lease_is_taken_over(rt: Runtime) -> None:
    # A worker that died holding the lease: owner set, expiry passed.
    eid = start_leased(rt, "dead-worker", timedelta(seconds=-1), status="running")
    assert run_execution(eid) == ResumeResult.FINISHED
    assert get_execution(eid).result == "done"


def test_live_lease_of_another_worker_defers(rt: Runtime) -> None:
    eid = start_leased(rt, "other-worker", timedelta(seconds=30))
    assert run_execution(eid) == ResumeResult.BUSY
    execution = get_execution(eid)
    assert execution.wake_pending is True and execution.status == "pending"
    assert not ExecutionStep.objects.filter(execution_id=eid).exists()


def test_run_that_lost_its_lease_records_nothing(rt: Runtime) -> None:
    def steal(execution_id: str) -> str:
        # Another worker takes over (as after an expiry) while this step runs.
        Execution.objects.filter(pk=execution_id).update(lease_owner="thief")
        return "stolen"

    @rt.workflow
    def wf(step: Step) -> Any:
        return (yield from step.run(steal, step.execution_id))

    eid = start_workflow(wf)
    rt.pump()
    assert rt.resumes == [(eid, "lost")]
    assert not ExecutionStep.objects.filter(execution_id=eid).exists()
    assert get_execution(eid).lease_owner == "thief"


def test_cancel_during_a_run_stops_recording(rt: Runtime) -> None:
    from yieldstar_django.runtime import cancel_execution

    @rt.workflow
    def wf(step: Step) -> Any:
        yield from step.run(cancel_execution, step.execution_id)
        yield from step.run(lambda: "never recorded")

    eid = start_workflow(wf)
    rt.settle()
    assert get_execution(eid).status == "cancelled"
    assert not ExecutionStep.objects.filter(execution_id=eid).exists()


def test_lease_timer_is_scheduled_and_cancelled(rt: Runtime) -> None:
    @rt.workflow
    def wf(step: Step) -> Any:
        yield from step.sleep(30)

    eid = start_workflow(wf)
    rt.pump()
    reasons = sorted(
        WakeIntent.objects.filter(execution_id=eid, delivered_at__isnull=True).values_list(
            "reason", flat=True
        )
    )
    # The sleep's timer stays; the takeover timer of the released lease is gone.
    assert reasons == ["sleep"]


def test_inline_sub_workflow_shares_the_execution(rt: Runtime) -> None:
    @rt.workflow
    def child(step: Step, n: int) -> Any:
        a = yield from step.run(lambda: n + 1, key=f"child-{n}")
        return a

    @rt.workflow
    def parent(step: Step) -> Any:
        x = yield from child(step, 1)
        y = yield from child(step, 2)
        return [x, y]

    eid = start_workflow(parent)
    rt.settle()
    assert get_execution(eid).result == [2, 3]
    assert set(rt.steps(eid)) == {"child-1", "child-2"}


def timed_out_once(rt: Runtime) -> Any:
    """A workflow of one ``run`` step whose first attempt hits Celery's soft time limit (a
    worker error, not the workflow's) and whose second returns ``"done"``."""
    from celery.exceptions import SoftTimeLimitExceeded

    attempts: list[int] = []

    def slow() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise SoftTimeLimitExceeded()
        return "done"

    @rt.workflow
    def wf(step: Step) -> Any:
        return (yield from step.run(slow))

    return wf


def test_worker_errors_are_not_recorded_and_the_execution_resumes(rt: Runtime) -> None:
    import pytest
    from celery.exceptions import SoftTimeLimitExceeded

    wf = timed_out_once(rt)

    eid = start_workflow(wf)
    with pytest.raises(SoftTimeLimitExceeded):
        run_execution(eid)
    assert not ExecutionStep.objects.filter(execution_id=eid).exists()
    # The lease was let go at once, so the next wake runs it again.
    assert run_execution(eid) == ResumeResult.FINISHED
    assert get_execution(eid).result == "done"


def test_a_lease_let_go_after_an_error_is_not_renewed_again(rt: Runtime, monkeypatch: Any) -> None:
    """A run that fails with a worker error lets its lease go at once, so the next wake
    runs the execution. A renewal of the process's lease keeper that lands after that (its
    round was under way when the run failed) must not take the lease back."""
    import pytest
    from celery.exceptions import SoftTimeLimitExceeded
    from django.test import override_settings

    from yieldstar_django.runtime import leases

    wf = timed_out_once(rt)

    renewals: list[bool] = []
    renew, stop = leases.Lease.renew, leases.Lease.stop_heartbeat

    def counted(self: leases.Lease) -> bool:
        renewals.append(renew(self))
        return renewals[-1]

    def after_one_more_renewal(self: leases.Lease) -> None:
        seen = len(renewals)
        wait_until("a renewal", lambda: len(renewals) > seen, interval=0.01)
        stop(self)

    monkeypatch.setattr(leases.Lease, "renew", counted)
    monkeypatch.setattr(leases.Lease, "stop_heartbeat", after_one_more_renewal)
    settings = {"WAKE_BACKEND": "tests.runtime.conftest.record_wakes", "LEASE_SECONDS": 0.3}
    with override_settings(YIELDSTAR=settings):
        eid = start_workflow(wf)
        with pytest.raises(SoftTimeLimitExceeded):
            run_execution(eid)
        assert run_execution(eid) == ResumeResult.FINISHED
    assert get_execution(eid).result == "done"


def test_a_run_longer_than_the_lease_keeps_it(rt: Runtime) -> None:
    """The process's lease keeper renews the lease while a slow step runs, within the
    renewal interval even when it was asleep with nothing to renew (up to a second) when
    the run took the lease."""
    import time

    from django.test import override_settings

    def slow(execution_id: str) -> str:
        def expiry() -> Any:
            return Execution.objects.get(pk=execution_id).lease_expires_at

        first = expiry()
        wait_until("a renewal of the lease while the step runs", lambda: expiry() > first)
        return "done"

    @rt.workflow
    def wf(step: Step) -> Any:
        return (yield from step.run(slow, step.execution_id))

    @rt.workflow
    def quick(step: Step) -> Any:
        return (yield from step.run(str, "done"))

    settings = {"WAKE_BACKEND": "tests.runtime.conftest.record_wakes", "LEASE_SECONDS": 0.3}
    with override_settings(YIELDSTAR=settings):
        # A short run first: the keeper has run and, with nothing left to renew, sleeps.
        assert run_execution(start_workflow(quick)) == ResumeResult.FINISHED
        time.sleep(0.2)
        eid = start_workflow(wf)
        assert run_execution(eid) == ResumeResult.FINISHED
    assert get_execution(eid).result == "done"  # renewed while the step ran, and kept


def cancel_from_another_thread(execution_id: str) -> None:
    """``cancel_execution`` as another process would call it (its own connection),
    waited for."""
    import threading

    from django.db import connections

    from yieldstar_django.runtime import cancel_execution

    done: list[bool] = []

    def cancel() -> None:
        try:
            done.append(cancel_execution(execution_id))
        finally:
            connections.close_all()

    thread = threading.Thread(target=cancel)
    thread.start()
    join_or_fail(thread, what="the cancel from another thread")
    assert done == [True], done


def test_a_take_cancelled_while_it_registers_its_waiter_leaves_no_waiter(
    rt: Runtime, monkeypatch: Any
) -> None:
    """A take that found nothing registers its waiter; the execution is cancelled meanwhile
    (before the registration commits). A cancelled execution keeps no waiter: the cancel
    removes them, and the run records nothing more."""
    import pytest
    from django.db import connection

    from yieldstar_django.models import Waiter
    from yieldstar_django.runtime import store_steps

    if not hasattr(rt.client, "using"):
        pytest.skip("the waiters of the database client")
    if connection.vendor != "postgresql":
        pytest.skip("SQLite serializes the cancel after the registration")
    store = rt.define()

    @rt.workflow
    def wf(step: Step) -> Any:
        return (yield from step.take(store, "q", lambda s: s["items"] or None))

    register = store_steps.wait_for

    def cancel_then_register(engine: Any, *args: Any, **kwargs: Any) -> bool:
        cancel_from_another_thread(engine.execution.id)
        return register(engine, *args, **kwargs)

    monkeypatch.setattr(store_steps, "wait_for", cancel_then_register)
    eid = start_workflow(wf)
    rt.pump()
    assert get_execution(eid).status == "cancelled"
    assert list(Waiter.objects.filter(execution_id=eid).values_list("step_key", flat=True)) == []


def waiting_take(rt: Runtime, needs: str) -> tuple[Any, str]:
    """On the database client (else skipped: ``needs``), an execution waiting to take
    ``"go"`` from a store; the store and the execution's id."""
    import pytest

    if not hasattr(rt.client, "using"):
        pytest.skip(needs)
    store = rt.define()

    @rt.workflow
    def wf(step: Step) -> Any:
        return (yield from step.take(store, "q", lambda s: "go" in s["items"] or None))

    eid = start_workflow(wf)
    rt.pump()
    return store, eid


def test_a_woken_take_cancelled_before_it_waits_again_leaves_no_waiter(
    rt: Runtime, monkeypatch: Any
) -> None:
    """A woken take finds nothing and registers its waiter again; the execution was
    cancelled since the run took its lease. The registration must not bring back a waiter
    the cancel removed."""
    from yieldstar_django.models import Waiter
    from yieldstar_django.runtime import store_steps

    store, eid = waiting_take(rt, "the waiters of the database client")
    assert Waiter.objects.filter(execution_id=eid).count() == 1
    register = store_steps.wait_for

    def cancel_then_register(engine: Any, *args: Any, **kwargs: Any) -> bool:
        cancel_from_another_thread(engine.execution.id)
        return register(engine, *args, **kwargs)

    monkeypatch.setattr(store_steps, "wait_for", cancel_then_register)
    rt.client.update_store(store, "q", updater=lambda d: d["items"].append("x"))  # wakes it
    rt.pump()
    assert get_execution(eid).status == "cancelled"
    assert list(Waiter.objects.filter(execution_id=eid).values_list("step_key", flat=True)) == []


def test_a_woken_take_that_missed_a_commit_looks_again_in_the_same_run(
    rt: Runtime, monkeypatch: Any
) -> None:
    """A woken run can read the store before the commit that woke it is visible (wakes go
    out while the database commits). Its registration then finds the store moved: rather
    than register a stale observation and be woken again through the broker, the take
    looks again in the same run and claims."""
    from yieldstar_django.models import Execution, WakeIntent
    from yieldstar_django.runtime import store_steps

    store, eid = waiting_take(rt, "the unless-stale registration of the database client")
    register = store_steps.wait_for
    pushed: list[bool] = []

    def commit_then_register(engine: Any, *args: Any, **kwargs: Any) -> bool:
        if not pushed:  # the commit lands between the take's read and its registration
            pushed.append(True)
            rt.client.update_store(store, "q", updater=lambda d: d["items"].append("go"))
        return register(engine, *args, **kwargs)

    monkeypatch.setattr(store_steps, "wait_for", commit_then_register)
    rt.client.update_store(store, "q", updater=lambda d: d["items"].append("x"))  # wakes it
    rt.pump()
    assert get_execution(eid).status == "completed"
    assert Execution.objects.get(pk=eid).runs == 2, "its first run and the woken one"
    assert not WakeIntent.objects.filter(execution_id=eid, reason="stale").exists()


def test_an_id_no_execution_can_have_is_not_found(rt: Runtime) -> None:
    """An id holding NUL (which PostgreSQL text cannot hold) names no execution: not found,
    as on SQLite, instead of a database error."""
    import pytest

    from yieldstar_django.runtime import cancel_execution

    for bad in ("a\x00b", "\x00"):
        with pytest.raises(Execution.DoesNotExist):
            get_execution(bad)
        assert cancel_execution(bad) is False
        assert str(run_execution(bad)) == "gone"


def test_stores_whose_names_read_alike_are_told_apart_on_replay(rt: Runtime) -> None:
    """A store name may hold "/": a take from store "<s>/a", id "b" and one from store
    "<s>", id "a/b" read alike ("<s>/a/b"). A deploy that swaps one for the other fails the
    replay with ``NonDeterminismError`` instead of replaying the recorded take as the other's.
    """
    from yieldstar_django.core.definition import define_store

    base = rt.name("store")
    rt.stores.extend([base, f"{base}/a"])
    initial = {"items": ["x"]}
    stores = {
        "nested": (define_store(f"{base}/a", None, initial=lambda id: initial), "b"),
        "flat": (define_store(base, None, initial=lambda id: initial), "a/b"),
    }
    version = {"store": "nested"}

    @rt.workflow
    def wf(step: Step) -> Any:
        definition, id = stores[version["store"]]
        yield from step.get(definition, id)
        yield from step.sleep(0.01)
        return "done"

    message = rt.nondeterminism_after(wf, lambda: version.update(store="flat"))
    assert "get" in message


def test_a_run_of_a_callable_named_past_512_characters_is_told_apart(rt: Runtime) -> None:
    """A ``run`` step's fingerprint is its callable's qualified name: a change past its
    512th character fails the replay with ``NonDeterminismError``."""

    def make(tail: str) -> Any:
        def fn() -> int:
            return 1

        fn.__qualname__ = "f" * 600 + tail
        return fn

    version = {"fn": make("old")}

    @rt.workflow
    def wf(step: Step) -> Any:
        yield from step.run(version["fn"])
        yield from step.sleep(0.01)
        return "done"

    message = rt.nondeterminism_after(wf, lambda: version.update(fn=make("new")))
    assert "run" in message
