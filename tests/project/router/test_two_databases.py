"""yieldstar on a second database, routed there: every row lands on ``DATABASE_ALIAS``,
nothing on ``default``, and a ``take`` still commits its step row with the store."""

from __future__ import annotations

from typing import Any

import pytest
from django.core import checks
from django.db import connections
from django.test import override_settings

from yieldstar_django.checks import check_database_alias
from yieldstar_django.connector import get_store_client
from yieldstar_django.core.definition import define_store
from yieldstar_django.models import (
    AppliedStep,
    Execution,
    ExecutionStep,
    StoreInstance,
    StoreVersion,
    Waiter,
    WaiterPath,
    WakeIntent,
)
from yieldstar_django.models.runtime import StepKind, StepStatus
from yieldstar_django.runtime import Step, get_execution, start_workflow, workflow
from yieldstar_django.runtime.context import RunState
from yieldstar_django.testing import run_until_idle

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "yieldstar"])

ROUTED = "yieldstar"
TABLES = [
    StoreInstance, StoreVersion, AppliedStep, Waiter, WaiterPath, WakeIntent, Execution,
    ExecutionStep,
]  # fmt: skip

queue = define_store("router-queue", None, initial=lambda id: {"items": []})


def first(state: Any) -> Any:
    return state["items"][0] if state["items"] else None


def pop_first(draft: Any, selected: Any) -> None:
    draft["items"].pop(0)


@workflow("router.consume")
def consume(step: Step, queue_id: str) -> Any:
    item = yield from step.take(queue, queue_id, first, pop_first)
    return item


def count(model: Any) -> int:
    return int(model.objects.using(ROUTED).count())


def test_every_row_lands_on_the_configured_alias_and_none_on_default() -> None:
    assert check_database_alias() == []
    eid = start_workflow(consume, "q1")
    run_until_idle()
    assert get_execution(eid).status == "waiting"
    assert (count(Waiter), count(WaiterPath)) >= (1, 1)

    get_store_client().update_store(queue, "q1", updater=lambda draft: draft["items"].append("job"))
    run_until_idle()

    assert get_execution(eid).result == "job"
    for model in (StoreInstance, StoreVersion, AppliedStep, WakeIntent, Execution, ExecutionStep):
        assert count(model) >= 1, model.__name__
    assert AppliedStep.objects.using(ROUTED).filter(execution_id=eid).count() == 1
    # The app's tables do not exist on ``default``: any read or write there would fail.
    on_default = set(connections["default"].introspection.table_names())
    assert not on_default & {model._meta.db_table for model in TABLES}


def test_a_take_commits_its_step_row_with_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """The heap row of a matched take fails to write inside the store commit: the claim
    and its ledger row roll back with it (they share the routed alias's transaction)."""
    client = get_store_client()
    client.update_store(queue, "q2", updater=lambda draft: draft["items"].append("job"))
    before = client.get_store(queue, "q2")
    original = RunState.write

    def failing_write(self: RunState, call: Any, *args: Any, **kwargs: Any) -> None:
        if call.kind == StepKind.TAKE and kwargs.get("status") == StepStatus.COMPLETED:
            raise RuntimeError("the heap write fails")
        original(self, call, *args, **kwargs)

    monkeypatch.setattr(RunState, "write", failing_write)
    eid = start_workflow(consume, "q2")
    run_until_idle()

    after = client.get_store(queue, "q2")
    assert (after.state, after.version) == (before.state, before.version)
    assert not AppliedStep.objects.using(ROUTED).filter(execution_id=eid).exists()
    assert get_execution(eid).status == "failed"


def test_a_router_that_disagrees_is_an_error() -> None:
    with override_settings(DATABASE_ROUTERS=["tests.project.router.routers.ElsewhereRouter"]):
        messages = check_database_alias()
    assert messages and {m.id for m in messages} == {"yieldstar.E005"}
    assert all(isinstance(m, checks.Error) for m in messages)
    assert check_database_alias() == []


def test_a_start_and_its_first_wake_commit_together(monkeypatch: pytest.MonkeyPatch) -> None:
    """``start_workflow`` writes the execution and the wake that runs it first in one
    transaction of the routed alias: when the wake cannot be written, no execution is left
    behind that nothing would ever run."""
    from yieldstar_django.runtime import timers

    def failing_request_run(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the wake cannot be written")

    monkeypatch.setattr(timers, "request_run", failing_request_run)
    with pytest.raises(RuntimeError):
        start_workflow(consume, "q3", execution_id="router-start")
    assert not Execution.objects.using(ROUTED).filter(pk="router-start").exists()


def test_a_cancel_and_its_clean_up_commit_together(monkeypatch: pytest.MonkeyPatch) -> None:
    """``cancel_execution`` marks the execution cancelled and removes its waiters in one
    transaction of the routed alias: when the clean-up fails, the execution is not left
    cancelled with its waiters still registered."""
    from yieldstar_django.connector.client import DatabaseStoreClient
    from yieldstar_django.runtime import cancel_execution

    eid = start_workflow(consume, "q4")
    run_until_idle()
    assert count(Waiter) >= 1

    def failing_remove(self: Any, execution_id: str) -> None:
        raise RuntimeError("the waiters cannot be removed")

    monkeypatch.setattr(DatabaseStoreClient, "remove_waiters", failing_remove)
    with pytest.raises(RuntimeError):
        cancel_execution(eid)
    assert get_execution(eid).status == "waiting"
    assert Waiter.objects.using(ROUTED).filter(execution_id=eid).exists()


def write_entries(execution_id: str, using: str | None) -> str:
    from tests.shared.models import Entry

    manager = Entry.objects.using(using) if using else Entry.objects
    manager.create(execution_id=execution_id, step="0", token="t")
    return manager.model._meta.app_label


@workflow("router.atomic")
def atomic_entries(step: Step, using: str | None) -> Any:
    return (yield from step.atomic(write_entries, step.execution_id, using))


def test_an_atomic_step_writes_the_app_s_database_and_is_refused_another() -> None:
    """A project's model routed to ``default`` (the router sends only yieldstar's there)
    written by a ``step.atomic`` function: refused (``CrossDatabaseWriteError``), nothing
    written on either database. The same model written on ``DATABASE_ALIAS`` commits with
    the step."""
    from tests.shared.models import Entry

    refused = start_workflow(atomic_entries, None)
    written = start_workflow(atomic_entries, ROUTED)
    run_until_idle()
    execution = get_execution(refused)
    assert execution.status == "failed"
    assert execution.error is not None
    assert execution.error["type"].endswith(":CrossDatabaseWriteError")
    assert "wrote through 'default'" in execution.error["message"]
    assert get_execution(written).result == "yieldstar_tests", get_execution(written).error
    for alias in ("default", ROUTED):
        assert not Entry.objects.using(alias).filter(execution_id=refused).exists()
    assert Entry.objects.using(ROUTED).filter(execution_id=written).count() == 1
    assert not Entry.objects.using("default").filter(execution_id=written).exists()
