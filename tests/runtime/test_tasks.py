"""The Celery task ``yieldstar_django.resume_execution`` (run eagerly, in this process)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from celery import current_app
from celery.exceptions import Retry
from django.db import OperationalError, connection

from tests.connections import DIRECT, second_connection
from tests.polling import wait_until
from tests.shared.fixtures import configure
from yieldstar_django import tasks
from yieldstar_django.runtime import get_execution, start_workflow

from .conftest import Runtime
from .test_steps import start_taking_items


def test_task_names() -> None:
    assert tasks.resume_execution.name == "yieldstar_django.resume_execution"
    assert tasks.relay_wakes.name == "yieldstar_django.relay_wakes"
    assert "yieldstar_django.resume_execution" in current_app.tasks


def test_task_resumes_and_is_idempotent(rt: Runtime) -> None:
    store, eid = start_taking_items(rt)
    assert tasks.resume_execution.apply(args=[eid]).get() == "suspended"
    assert tasks.resume_execution.apply(args=[eid]).get() == "suspended"
    rt.client.update_store(store, "q", updater=lambda d: d["items"].append("x"))
    assert tasks.resume_execution.apply(args=[eid]).get() == "finished"
    assert tasks.resume_execution.apply(args=[eid]).get() == "gone"
    assert get_execution(eid).result == ["x"]


def test_database_error_retries_the_task(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    def down(execution_id: str) -> None:
        raise OperationalError("the database restarts")

    monkeypatch.setattr(tasks, "run_execution", down)
    retried: list[int] = []

    def retry(**kwargs: Any) -> Exception:
        retried.append(kwargs["countdown"])
        return RuntimeError("retry requested")

    monkeypatch.setattr(tasks.resume_execution, "retry", retry)
    connection.ensure_connection()  # kept and usable: the error is not the connection's
    with pytest.raises(RuntimeError, match="retry requested"):
        tasks.resume_execution.apply(args=["any"], throw=True).get()
    assert retried == [1]


@DIRECT
def test_a_connection_closed_while_idle_is_replaced_at_once(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker keeps its connection between tasks (``CONN_MAX_AGE``); when the server
    closed it in between, the resume runs again at once on a new one: no Celery retry, and
    no ``CONN_HEALTH_CHECKS`` needed."""
    if connection.vendor != "postgresql":
        pytest.skip("closing a connection from the server side needs PostgreSQL")
    store, eid = start_taking_items(rt)
    rt.client.update_store(store, "q", updater=lambda d: d["items"].append("x"))
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", None)
    monkeypatch.setitem(connection.settings_dict, "CONN_HEALTH_CHECKS", False)
    connection.close()
    connection.ensure_connection()
    pid = connection.connection.info.backend_pid
    with second_connection() as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        gone = "SELECT 1 FROM pg_stat_activity WHERE pid = %s"
        wait_until("the backend to end", lambda: not admin.execute(gone, [pid]).fetchone())
    retried: list[int] = []
    monkeypatch.setattr(tasks.resume_execution, "retry", lambda **kw: retried.append(1))
    with caplog.at_level(logging.INFO, logger="yieldstar_django.tasks"):
        assert tasks.resume_execution.apply(args=[eid], throw=True).get() == "finished"
    assert retried == []
    assert [r.getMessage() for r in caplog.records] == [
        f"resume of {eid} found its connection broken; reconnecting"
    ]
    assert get_execution(eid).result == ["x"]
    assert connection.connection.info.backend_pid != pid


@DIRECT
def test_a_connection_cut_during_the_run_is_replaced_at_once(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection is cut while a step runs (the server restarts, a proxy drops it):
    the run cannot record the step, and the resume runs again at once on a new
    connection. The lease of the cut run must not stand in its way until it expires."""
    if connection.vendor != "postgresql":
        pytest.skip("closing a connection from the server side needs PostgreSQL")
    from yieldstar_django.runtime import Step, start_workflow

    cuts: list[int] = []

    def cut_my_connection() -> str:
        if not cuts:
            pid = connection.connection.info.backend_pid
            cuts.append(pid)
            with second_connection() as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", [pid])
                gone = "SELECT 1 FROM pg_stat_activity WHERE pid = %s"
                wait_until("the backend to end", lambda: not admin.execute(gone, [pid]).fetchone())

        return "done"

    @rt.workflow
    def wf(step: Step) -> Any:
        return (yield from step.run(cut_my_connection))

    eid = start_workflow(wf)
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", None)
    monkeypatch.setitem(connection.settings_dict, "CONN_HEALTH_CHECKS", False)
    connection.close()
    connection.ensure_connection()  # kept from an earlier task
    retried: list[int] = []
    monkeypatch.setattr(tasks.resume_execution, "retry", lambda **kw: retried.append(1))
    assert tasks.resume_execution.apply(args=[eid], throw=True).get() == "finished"
    assert retried == [] and len(cuts) == 1
    assert get_execution(eid).result == "done"


@pytest.mark.django_db(databases=["default"])
def test_a_task_run_eagerly_inside_the_callers_transaction_leaves_it_usable(
    yieldstar: Any,
) -> None:
    """``task_always_eager`` (a common test setting) and ``.apply()`` run a task in the
    caller's thread, inside the caller's transaction when there is one: a ``TestCase``'s
    (here pytest-django's ``db``), a view's under ``ATOMIC_REQUESTS``. The stale-connection
    cleanup each task makes around its run in a worker must leave that connection alone:
    closing it ends the caller's transaction, which loses what it wrote and refuses every
    query until the ``atomic`` block ends (as Celery's own Django fixup leaves an eager
    task's connections alone)."""
    from tests.testing.example.workflows import pick_next

    execution_id = start_workflow(pick_next, "north")  # uncommitted: the test's transaction
    app = tasks.resume_execution.app
    eager = app.conf.task_always_eager
    app.conf.task_always_eager = True
    try:
        assert tasks.resume_execution.delay(execution_id).get() == "suspended"
        assert tasks.prune_executions.delay().get() == 0
        assert tasks.resume_execution.apply(args=[execution_id]).get() == "suspended"
    finally:
        app.conf.task_always_eager = eager
    assert connection.in_atomic_block and not connection.needs_rollback
    assert get_execution(execution_id).status == "waiting"


def test_a_group_task_resumes_each_execution_in_turn(rt: Runtime) -> None:
    started = [start_taking_items(rt)[1] for _ in range(3)]
    assert tasks.resume_executions.name == "yieldstar_django.resume_executions"
    assert tasks.resume_executions.apply(args=[started]).get() == ["suspended"] * 3
    assert tasks.resume_executions.apply(args=[started]).get() == ["suspended"] * 3


def test_a_database_error_retries_the_group_from_the_execution_it_hit(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[str] = []

    def run(execution_id: str) -> str:
        if execution_id == "b":
            raise OperationalError("the database restarts")
        ran.append(execution_id)
        return "finished"

    monkeypatch.setattr(tasks, "run_execution", run)
    retried: list[Any] = []

    def retry(**kwargs: Any) -> Exception:
        retried.append((kwargs["args"], kwargs["countdown"]))
        return Retry("retry requested")

    monkeypatch.setattr(tasks.resume_executions, "retry", retry)
    connection.ensure_connection()
    with pytest.raises(Retry, match="retry requested"):
        tasks.resume_executions.apply(args=[["a", "b", "c"]], throw=True).get()
    assert ran == ["a"]
    assert retried == [([["b", "c"]], 1)]


def test_a_group_gives_its_pool_process_back_after_the_run_slice(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The executions left once ``RUN_SLICE_SECONDS`` passed are sent on as a new
    group message; an error of one execution does not stop the others."""
    ran: list[str] = []

    def run(execution_id: str) -> str:
        ran.append(execution_id)
        if execution_id == "a":
            raise RuntimeError("a bug of the runtime")
        return "finished"

    sent: list[list[str]] = []
    monkeypatch.setattr(tasks, "run_execution", run)
    monkeypatch.setattr(tasks, "resend_group", sent.append)
    with configure(RUN_SLICE_SECONDS=3600):
        assert tasks.resume_executions.apply(args=[["a", "b"]]).get() == ["error", "finished"]
    assert ran == ["a", "b"]
    ran.clear()
    with configure(RUN_SLICE_SECONDS=0):
        assert tasks.resume_executions.apply(args=[["x", "y", "z"]]).get() == ["finished"]
    assert ran == ["x"]
    assert sent == [["y", "z"]]
