"""OpenTelemetry spans of the runtime, exported by the SDK's in-memory exporter: one trace
from a start or a store commit to the steps it resumes, the attributes of each span, errors
recorded, and the trace context an execution and its wakes carry."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from yieldstar_django import get_store_client, start_workflow, tasks
from yieldstar_django.models import Execution
from yieldstar_django.observability import tracing
from yieldstar_django.testing.pytest_plugin import YieldstarHelper

from .conftest import yieldstar_settings
from .workflows import inbox

pytestmark = pytest.mark.django_db(transaction=True)


def _named(spans: Any, name: str) -> list[Any]:
    return [s for s in spans.get_finished_spans() if s.name == name]


def _one(spans: Any, name: str, **attributes: object) -> Any:
    found = [
        s
        for s in _named(spans, name)
        if all(s.attributes.get(k) == v for k, v in attributes.items())
    ]
    assert len(found) == 1, (name, attributes, [(s.name, dict(s.attributes)) for s in found])
    return found[0]


def _parent_chain(spans: Any, span: Any) -> list[str]:
    """The names of ``span`` and its ancestors among the exported spans, innermost first."""
    by_id = {s.context.span_id: s for s in spans.get_finished_spans()}
    names = []
    while span is not None:
        names.append(span.name)
        span = by_id.get(span.parent.span_id) if span.parent is not None else None
    return names


def test_a_start_and_its_steps_make_one_trace(spans: Any, yieldstar: YieldstarHelper) -> None:
    store_id = f"s-{uuid.uuid4().hex[:8]}"
    eid = start_workflow("obs.take_then_run", store_id)
    start = _one(spans, "yieldstar.start", **{"yieldstar.execution.id": eid})
    assert start.attributes["yieldstar.workflow"] == "obs.take_then_run"
    assert start.attributes["yieldstar.start.via"] == "python"
    # The execution keeps the start's context: its later runs link to it.
    stored = Execution.objects.get(pk=eid).trace_context
    assert stored.startswith(f"00-{start.context.trace_id:032x}-{start.context.span_id:016x}-")
    wake = _one(spans, "yieldstar.wake", **{"yieldstar.execution.id": eid})
    assert wake.parent.span_id == start.context.span_id

    yieldstar.run_until_idle()
    take = _one(spans, "yieldstar.step", **{"yieldstar.step.kind": "take"})
    assert take.attributes["yieldstar.step.outcome"] == "suspended"
    assert take.attributes["yieldstar.store"] == "obs-inbox"
    assert take.attributes["yieldstar.store.id"] == store_id
    assert take.attributes["yieldstar.step.attempt"] == 1
    run = _one(spans, "yieldstar.run", **{"yieldstar.run.outcome": "waiting"})
    assert take.parent.span_id == run.context.span_id
    assert [link.context.span_id for link in run.links] == [start.context.span_id]

    spans.clear()
    get_store_client().update_store(inbox, store_id, updater=lambda d: d["items"].append(21))
    commit = _one(spans, "yieldstar.store.commit", **{"yieldstar.store.version": 1})
    assert commit.attributes["yieldstar.outcome"] == "committed"
    assert commit.attributes["yieldstar.store.id"] == store_id
    assert commit.attributes["yieldstar.store"] == "obs-inbox"
    assert commit.parent is None  # the update's own span is the trace's root
    resumed = _one(spans, "yieldstar.step", **{"yieldstar.step.kind": "take"})
    assert resumed.attributes["yieldstar.step.outcome"] == "completed"
    assert resumed.attributes["yieldstar.step.attempt"] == 2  # its second execution
    assert resumed.attributes["yieldstar.store.version"] == 2  # the take's claim committed
    run_step = _one(spans, "yieldstar.step", **{"yieldstar.step.kind": "run"})
    assert run_step.attributes["yieldstar.step.outcome"] == "completed"
    # The inline backend runs the wake in the commit's trace: commit, wake, run, step.
    assert _parent_chain(spans, resumed) == [
        "yieldstar.step",
        "yieldstar.run",
        "yieldstar.wake",
        "yieldstar.store.commit",
    ]
    assert {s.context.trace_id for s in spans.get_finished_spans()} == {commit.context.trace_id}
    assert Execution.objects.get(pk=eid).status == "completed"


def test_a_failed_step_and_run_record_the_error(spans: Any, yieldstar: YieldstarHelper) -> None:
    eid = start_workflow("obs.fails")
    yieldstar.run_until_idle()
    assert Execution.objects.get(pk=eid).status == "failed"
    step = _one(spans, "yieldstar.step", **{"yieldstar.step.kind": "run"})
    assert step.attributes["yieldstar.step.outcome"] == "failed"
    assert step.status.status_code.name == "ERROR"
    [event] = [e for e in step.events if e.name == "exception"]
    assert event.attributes["exception.type"].endswith("ValueError")
    assert event.attributes["exception.message"] == "broken on purpose"
    run = _one(spans, "yieldstar.run", **{"yieldstar.execution.id": eid})
    assert run.attributes["yieldstar.run.outcome"] == "failed"
    assert run.status.status_code.name == "ERROR"


def test_an_error_whose_str_raises_is_recorded_by_its_type(
    spans: Any, yieldstar: YieldstarHelper
) -> None:
    """Recording it on the span raised the error's own error out of the run."""
    eid = start_workflow("obs.fails_unprintably")
    yieldstar.run_until_idle()
    assert Execution.objects.get(pk=eid).status == "failed"
    step = _one(spans, "yieldstar.step", **{"yieldstar.step.kind": "run"})
    assert step.status.status_code.name == "ERROR"
    [event] = [e for e in step.events if e.name == "exception"]
    assert event.attributes["exception.type"].endswith("Unprintable")


def test_the_resume_task_continues_the_wake_s_trace(spans: Any) -> None:
    """A resume message's ``traceparent`` (what the Celery backend sends) is the parent of
    the task's span; without one, the execution's start is."""
    store_id = f"s-{uuid.uuid4().hex[:8]}"
    with yieldstar_settings(WAKE_BACKEND=lambda wakes: None):
        eid = start_workflow("obs.take_then_run", store_id)
        start = _one(spans, "yieldstar.start")
        spans.clear()
        assert tasks.resume_execution.apply(args=[eid]).get() == "suspended"
        resume = _one(spans, "yieldstar.resume")
        assert resume.parent.span_id == start.context.span_id
        assert resume.context.trace_id == start.context.trace_id
        assert resume.attributes["yieldstar.resume.result"] == "suspended"
        run = _one(spans, "yieldstar.run")
        assert run.parent.span_id == resume.context.span_id

        spans.clear()
        waker = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        headers = {"traceparent": waker}
        assert tasks.resume_execution.apply(args=[eid], headers=headers).get() == "suspended"
        resume = _one(spans, "yieldstar.resume")
        assert f"{resume.context.trace_id:032x}" == "0af7651916cd43dd8448eb211c80319c"
        assert f"{resume.parent.span_id:016x}" == "b7ad6b7169203331"


def test_a_group_of_resumes_continues_each_start_s_trace_read_at_once(spans: Any) -> None:
    """A group message without a ``traceparent``: each resume's span continues its own
    execution's start, the starts' contexts read in one statement for the group."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with yieldstar_settings(WAKE_BACKEND=lambda wakes: None):
        ids = [start_workflow("obs.take_then_run", f"s-{uuid.uuid4().hex[:8]}") for _ in range(3)]
        starts = {
            s.attributes["yieldstar.execution.id"]: s for s in _named(spans, "yieldstar.start")
        }
        spans.clear()
        with CaptureQueriesContext(connection) as queries:
            assert tasks.resume_executions.apply(args=[ids]).get() == ["suspended"] * 3
        lookups = [q["sql"] for q in queries if q["sql"].startswith("SELECT id, trace_context")]
        assert len(lookups) == 1
        assert not [q for q in queries if q["sql"].startswith("SELECT trace_context")]
        for eid in ids:
            resume = _one(spans, "yieldstar.resume", **{"yieldstar.execution.id": eid})
            assert resume.parent.span_id == starts[eid].context.span_id


def test_the_celery_backend_sends_the_wake_s_trace_context(spans: Any) -> None:
    from yieldstar_django.wakes import backends

    with tracing.span("outer") as outer:
        assert isinstance(outer, tracing.Span)
        headers = backends.wake_headers()
    assert headers is not None
    [outer_span] = _named(spans, "outer")
    assert headers["traceparent"].startswith(
        f"00-{outer_span.context.trace_id:032x}-{outer_span.context.span_id:016x}-"
    )


def test_tracing_off_makes_no_span_and_stores_no_context(
    spans: Any, yieldstar: YieldstarHelper
) -> None:
    with yieldstar_settings(TRACING=False):
        assert tracing.span("x") is tracing.OFF
        assert tracing.current_traceparent() == ""
        eid = start_workflow("obs.steps", 3)
        yieldstar.run_until_idle()
    assert Execution.objects.get(pk=eid).status == "completed"
    assert Execution.objects.get(pk=eid).trace_context == ""
    assert spans.get_finished_spans() == ()


def test_a_settings_reload_does_not_read_the_package_metadata_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tracer is made again after each reload; the version it is named with is read
    from the package's metadata (files on disk) once per process."""
    reads: list[str] = []
    version = tracing.metadata.version

    def counted(name: str) -> str:
        reads.append(name)
        return version(name)

    monkeypatch.setattr(tracing.metadata, "version", counted)
    for _ in range(3):
        with yieldstar_settings(TRACING=True):
            assert tracing.enabled()
    assert len(reads) <= 1
