"""The Celery task ``yieldstar_django.resume_execution`` (run eagerly, in this process)."""

from __future__ import annotations

from typing import Any

import pytest
from celery import current_app
from django.db import OperationalError

from yieldstar_django import tasks
from yieldstar_django.runtime import get_execution

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
    with pytest.raises(RuntimeError, match="retry requested"):
        tasks.resume_execution.apply(args=["any"], throw=True).get()
    assert retried == [1]
