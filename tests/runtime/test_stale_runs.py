"""A run whose lease was taken over records nothing more, waiters included.

A worker stops in the middle of a take (a long GC pause, a frozen VM) after the take read
the store and found nothing; its lease expires, and another worker's run takes it over,
takes the item pushed meanwhile (completing the step) and moves on. When the first run
goes on, its registration of the step's waiter must register nothing (the lease is not
its own any more) and stop the run: a waiter registered then is an orphan, for a step the
execution already completed, which costs a spurious wake and stays until retention.

Both runs are real runs (``run_execution``) of one execution on the database client, the
second in a thread of its own (another worker, its own connection); nothing but the
first run's timing is arranged.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections
from django.utils import timezone

from tests.polling import join_or_fail
from yieldstar_django.core.definition import StoreDefinition
from yieldstar_django.models import Execution, ExecutionStep, Waiter, WakeIntent
from yieldstar_django.runtime import Step, executions, get_execution, start_workflow
from yieldstar_django.runtime.executions import ResumeResult, run_execution
from yieldstar_django.runtime.leases import Lease, acquire_lease

from .conftest import Runtime


def first(state: Any) -> Any:
    return state["items"][0] if state["items"] else None


def pop_first(draft: Any, selected: Any) -> None:
    draft["items"].pop(0)


@pytest.fixture
def dbrt(rt: Runtime) -> Runtime:
    if rt.client.__class__.__name__ == "MemoryStoreClient":
        pytest.skip("needs the database client (the heap's database holds its waiters)")
    return rt


class PausedRun:
    """The next run of an execution, once armed, pauses in its take's selector (after the
    take read the store), as its worker stopped there: its lease keeper stops too, its
    lease expires, and ``meanwhile`` runs in another thread (another worker). Then the
    paused run goes on with what its selector was given."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.lease: Lease | None = None
        self.meanwhile: Callable[[], None] | None = None
        monkeypatch.setattr(executions, "acquire_lease", self._acquire)

    def arm(self, meanwhile: Callable[[], None]) -> None:
        self.meanwhile = meanwhile

    def _acquire(self, execution_id: str) -> Lease | None:
        lease = acquire_lease(execution_id)
        if lease is not None and self.meanwhile is not None and self.lease is None:
            self.lease = lease
            # On PostgreSQL the lease read the waited store ahead, and a take that finds
            # nothing in that read reads the store again: dropped, the take reads it once
            # (as on SQLite, or for a store over MAX_READ_AHEAD), and the pause follows
            # the take's last read.
            lease.take_reads()
        return lease

    def select(self, state: Any) -> Any:
        """``first``; the armed run pauses here the first time."""
        if self.lease is not None and self.meanwhile is not None:
            meanwhile, self.meanwhile = self.meanwhile, None
            self.lease.stop_heartbeat()
            expired = timezone.now() - timedelta(seconds=1)
            Execution.objects.filter(pk=self.lease.execution_id).update(lease_expires_at=expired)
            errors: list[BaseException] = []

            def worker() -> None:
                try:
                    meanwhile()
                except BaseException as exc:  # reported below
                    errors.append(exc)
                finally:
                    connections.close_all()

            thread = threading.Thread(target=worker)
            thread.start()
            join_or_fail(thread, what="the work on another connection")
            assert not errors, errors
        return first(state)


def push(rt: Runtime, store: StoreDefinition, item: Any) -> None:
    rt.client.update_store(store, "q", updater=lambda d: d["items"].append(item))


def successor(rt: Runtime, store: StoreDefinition, execution_id: str) -> Callable[[], None]:
    """Another worker: an item is pushed, and a run of the execution takes the lease over,
    takes the item and moves on to its sleep."""

    def run() -> None:
        push(rt, store, "job")
        assert run_execution(execution_id) == ResumeResult.SUSPENDED

    return run


def assert_moved_on_without_waiters(execution_id: str) -> None:
    """The successor completed the take (step ``0``) and sleeps; no waiter is left, and
    no wake was written for a stale observation."""
    take = ExecutionStep.objects.get(execution_id=execution_id, step_key="0")
    assert take.status == "completed"
    assert get_execution(execution_id).status == "sleeping"
    waiters = Waiter.objects.filter(execution_id=execution_id)
    assert list(waiters.values_list("step_key", flat=True)) == []
    assert not WakeIntent.objects.filter(execution_id=execution_id, reason="stale").exists()


def test_a_woken_take_whose_lease_was_taken_over_registers_no_waiter(
    dbrt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The take waits (its waiter registered); a run of it finds the store still empty
    and pauses; the successor takes the item. The paused run's registration, which would
    replace the step's waiter, registers nothing, and the run ends ``LOST``."""
    inbox = dbrt.define()
    paused = PausedRun(monkeypatch)

    @dbrt.workflow
    def wf(step: Step) -> Any:
        got = yield from step.take(inbox, "q", paused.select, pop_first)
        yield from step.sleep(3600)
        return got

    eid = start_workflow(wf)
    dbrt.pump()
    assert get_execution(eid).status == "waiting"
    assert Waiter.objects.filter(execution_id=eid).count() == 1

    paused.arm(successor(dbrt, inbox, eid))
    assert run_execution(eid) == ResumeResult.LOST
    assert_moved_on_without_waiters(eid)


def test_a_woken_take_any_whose_lease_was_taken_over_registers_no_waiter(
    dbrt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a take: the paused run of a ``take_any`` registers neither choice's waiter again
    (both in one transaction) once the successor took an item of the first choice."""
    a, b = dbrt.define(), dbrt.define()
    paused = PausedRun(monkeypatch)

    @dbrt.workflow
    def wf(step: Step) -> Any:
        got = yield from step.take_any(
            [(a, "q", paused.select, pop_first), (b, "q", first, pop_first)]
        )
        yield from step.sleep(3600)
        return list(got)

    eid = start_workflow(wf)
    dbrt.pump()
    assert Waiter.objects.filter(execution_id=eid).count() == 2

    paused.arm(successor(dbrt, a, eid))
    assert run_execution(eid) == ResumeResult.LOST
    assert_moved_on_without_waiters(eid)


def test_a_first_take_whose_lease_was_taken_over_registers_no_waiter(
    dbrt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first run of a take pauses the same way: its registration shares a transaction
    with the step's pending heap row, whose insert finds the successor's row (and the
    lease gone), so nothing of it commits."""
    inbox = dbrt.define()
    paused = PausedRun(monkeypatch)

    @dbrt.workflow
    def wf(step: Step) -> Any:
        got = yield from step.take(inbox, "q", paused.select, pop_first)
        yield from step.sleep(3600)
        return got

    eid = start_workflow(wf)
    paused.arm(successor(dbrt, inbox, eid))
    assert run_execution(eid) == ResumeResult.LOST
    assert_moved_on_without_waiters(eid)
