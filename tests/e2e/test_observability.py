"""One trace from an HTTP ``PATCH`` of a store, in this process, to the step it resumes in a
real Celery worker (prefork pool), and the metrics of that worker's pool processes scraped
in prometheus-client's multiprocess mode.

This process exports its spans with the OpenTelemetry SDK's in-memory exporter; the worker,
another process, appends its own to a file (``tests/e2e/spans.py``). The trace context
crosses in the resume message's ``traceparent`` header."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from tests.observability.conftest import _exporter
from yieldstar_django.models import Execution
from yieldstar_django.observability import metrics
from yieldstar_django.runtime import get_execution, start_workflow

from . import spans as worker_spans
from .conftest import E2E_MARKS, Env, wait_until

pytestmark = [*E2E_MARKS, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def observed(e2e: Env, tmp_path_factory: pytest.TempPathFactory) -> tuple[Env, Path, Path]:
    """A worker exporting its spans to a file and its metrics to a multiprocess folder, and
    a relay."""
    folder = tmp_path_factory.mktemp("observed")
    span_file, metrics_dir = folder / "spans.jsonl", folder / "metrics"
    metrics_dir.mkdir()
    e2e.start_worker(
        "observed",
        env={"YIELDSTAR_E2E_SPANS": str(span_file), "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)},
    )
    e2e.start_relay()
    return e2e, span_file, metrics_dir


def _client() -> Client:
    user = User.objects.create_user(f"writer-{uuid.uuid4().hex[:6]}", password="pw")
    for codename in ("view_storeinstance", "change_storeinstance"):
        user.user_permissions.add(Permission.objects.get(codename=codename))
    client = Client()
    client.force_login(user)
    return client


def _resumed_take(span_file: Path, execution_id: str) -> dict[str, Any] | None:
    for span in worker_spans.read(span_file):
        attributes = span["attributes"]
        if (
            span["name"] == "yieldstar.step"
            and attributes.get("yieldstar.step.kind") == "take"
            and attributes.get("yieldstar.step.outcome") == "completed"
            and attributes.get("yieldstar.store.id", "").startswith("traced-")
            and span["trace_id"] in _traces_of(span_file, execution_id)
        ):
            return span
    return None


def _traces_of(span_file: Path, execution_id: str) -> set[str]:
    return {
        span["trace_id"]
        for span in worker_spans.read(span_file)
        if span["attributes"].get("yieldstar.execution.id") == execution_id
    }


def test_one_trace_from_an_http_patch_to_the_resumed_step(
    observed: tuple[Env, Path, Path],
) -> None:
    _, span_file, _ = observed
    exporter = _exporter()
    store_id = f"traced-{uuid.uuid4().hex[:8]}"
    eid = start_workflow("e2e.take_one", store_id)
    wait_until("the take to wait", lambda: Execution.objects.get(pk=eid).status == "waiting")
    exporter.clear()
    response = _client().patch(
        f"/yieldstar/stores/e2e.jobs/{store_id}/",
        json.dumps({"items": [{"value": "hello", "claimed_by": None}]}),
        content_type="application/merge-patch+json",
    )
    assert response.status_code == 200, response.content
    wait_until("the execution to complete", lambda: get_execution(eid).is_finished)
    assert get_execution(eid).result == "hello"

    # This process: the PATCH's commit (the trace's root here) and the wake it published.
    here = {s.name: s for s in exporter.get_finished_spans()}
    commit, wake = here["yieldstar.store.commit"], here["yieldstar.wake"]
    assert commit.attributes["yieldstar.store.id"] == store_id
    assert commit.parent is None
    assert wake.parent.span_id == commit.context.span_id
    trace_id = f"{commit.context.trace_id:032x}"

    # The worker: resume, run and the resumed take, in the same trace, under the wake.
    wait_until("the worker's spans", lambda: _resumed_take(span_file, eid) is not None)
    there = [s for s in worker_spans.read(span_file) if s["trace_id"] == trace_id]
    by_id = {s["span_id"]: s for s in there}
    take = next(
        s
        for s in there
        if s["name"] == "yieldstar.step" and s["attributes"]["yieldstar.step.kind"] == "take"
    )
    assert take["attributes"]["yieldstar.step.outcome"] == "completed"
    assert take["attributes"]["yieldstar.store"] == "e2e.jobs"
    chain, span = [], take
    while span is not None:
        chain.append(span["name"])
        span = by_id.get(span["parent_id"])
    assert chain == ["yieldstar.step", "yieldstar.run", "yieldstar.resume"]
    resume = by_id[take["parent_id"]]
    resume = by_id[resume["parent_id"]]
    assert resume["parent_id"] == f"{wake.context.span_id:016x}"
    assert resume["attributes"]["yieldstar.execution.id"] == eid
    assert resume["pid"] != __import__("os").getpid()


def test_the_metrics_of_the_worker_s_pool_processes(
    observed: tuple[Env, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    env, _, metrics_dir = observed
    store_id = f"counted-{uuid.uuid4().hex[:8]}"
    eid = start_workflow("e2e.take_one", store_id)
    wait_until("the take to wait", lambda: Execution.objects.get(pk=eid).status == "waiting")
    from tests.e2e.workflows import push

    push(store_id, ["x"])
    wait_until("the execution to complete", lambda: get_execution(eid).is_finished)
    assert list(metrics_dir.glob("*.db")), "the worker wrote no samples"
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(metrics_dir))
    body = metrics.exposition()[0].decode()
    from prometheus_client.parser import text_string_to_metric_families

    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }
    finished = ("status", "completed"), ("workflow", "e2e.take_one")
    assert samples[("yieldstar_executions_finished_total", finished)] >= 1
    assert samples[("yieldstar_step_duration_seconds_count", (("kind", "take"),))] >= 2
    assert samples[("yieldstar_wake_latency_seconds_count", ())] >= 1
    assert ("yieldstar_outbox_depth", ()) in samples
    assert ("yieldstar_outbox_oldest_age_seconds", ()) in samples
    assert env.broker.kind in ("redis", "amqp")
