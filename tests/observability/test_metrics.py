"""Prometheus metrics of the runtime, read from a registry of each test's own
(``METRICS_REGISTRY``): executions started and finished, step durations, wake latency, the
outbox gauges read at scrape time, lease takeovers, compare-and-swap retries, contention
errors and relay lag; the ``/metrics`` views; metrics off."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser, Permission, User
from django.core.exceptions import PermissionDenied
from django.test import RequestFactory

from yieldstar_django import clock, get_store_client, start_workflow, tasks
from yieldstar_django.connector import DatabaseStoreClient
from yieldstar_django.core.errors import StoreContentionError
from yieldstar_django.models import Execution
from yieldstar_django.observability import metrics, views
from yieldstar_django.runtime import timers
from yieldstar_django.testing.pytest_plugin import YieldstarHelper
from yieldstar_django.wakes.relay import relay_once

from .conftest import yieldstar_settings
from .workflows import inbox

pytestmark = pytest.mark.django_db(transaction=True)


def _value(registry: Any, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, labels)
    return 0.0 if value is None else float(value)


def _no_backend() -> Any:
    """Settings with a wake backend that delivers nothing (the intents stay due)."""
    return yieldstar_settings(WAKE_BACKEND=lambda wakes: None)


def test_executions_steps_and_wake_latency(registry: Any, yieldstar: YieldstarHelper) -> None:
    store_id = f"m-{uuid.uuid4().hex[:8]}"
    workflow = {"workflow": "obs.take_then_run"}
    eid = start_workflow("obs.take_then_run", store_id)
    assert _value(registry, "yieldstar_executions_started_total", **workflow) == 1
    yieldstar.run_until_idle()
    assert _value(registry, "yieldstar_step_duration_seconds_count", kind="take") == 1
    with _no_backend():
        get_store_client().update_store(inbox, store_id, updater=lambda d: d["items"].append(1))
    # A worker's resume of a commit's wake: the message carries when the wake was sent.
    woken_at = time.time() - 2.0
    headers = {metrics.WOKEN_AT_HEADER: woken_at}
    assert tasks.resume_execution.apply(args=[eid], headers=headers).get() == "finished"
    assert _value(registry, "yieldstar_wake_latency_seconds_count") == 1
    assert _value(registry, "yieldstar_wake_latency_seconds_sum") >= 2.0
    assert _value(registry, "yieldstar_wake_latency_seconds_bucket", le="1.0") == 0
    assert _value(registry, "yieldstar_step_duration_seconds_count", kind="take") == 2
    assert _value(registry, "yieldstar_step_duration_seconds_count", kind="run") == 1
    finished = {**workflow, "status": "completed"}
    assert _value(registry, "yieldstar_executions_finished_total", **finished) == 1
    start_workflow("obs.fails")
    yieldstar.run_until_idle()
    failed = {"workflow": "obs.fails", "status": "failed"}
    assert _value(registry, "yieldstar_executions_finished_total", **failed) == 1


def test_the_outbox_gauges_read_the_database_at_scrape(
    registry: Any, yieldstar: YieldstarHelper
) -> None:
    assert _value(registry, "yieldstar_outbox_depth") == 0
    assert _value(registry, "yieldstar_outbox_oldest_age_seconds") == 0
    with _no_backend():
        start_workflow("obs.steps", 1)
        start_workflow("obs.steps", 2)
    assert _value(registry, "yieldstar_outbox_depth") == 2
    yieldstar.advance_time(90)
    assert _value(registry, "yieldstar_outbox_oldest_age_seconds") >= 90
    # A timer not due yet is not in the outbox's depth.
    with _no_backend():
        eid = start_workflow("obs.steps", 3)
        timers.schedule_timer(eid, "obs.steps", clock.now() + timedelta(hours=1), reason="x")
    assert _value(registry, "yieldstar_outbox_depth") == 3
    yieldstar.run_until_idle()
    assert _value(registry, "yieldstar_outbox_depth") == 0


def test_the_relay_counts_its_lag_and_the_lease_takeovers(
    registry: Any, yieldstar: YieldstarHelper
) -> None:
    with _no_backend():
        eid = start_workflow("obs.steps", 1)
        timers.schedule_timer(eid, "obs.steps", clock.now(), reason="lease")
        yieldstar.advance_time(30)
        assert relay_once() == 2
    assert _value(registry, "yieldstar_relay_lag_seconds_count") == 1
    assert _value(registry, "yieldstar_relay_lag_seconds_sum") >= 30
    assert _value(registry, "yieldstar_lease_takeovers_total") == 1


def _racing_updater(client: DatabaseStoreClient, store_id: str, races: int) -> Any:
    """An updater that, the first ``races`` times it runs, lets another client commit
    first: each of those commits loses its compare-and-swap."""
    other = DatabaseStoreClient()
    calls = []

    def updater(draft: Any) -> None:
        if len(calls) < races:
            other.update_store(inbox, store_id, updater=lambda d: d["items"].append("x"))
        calls.append(1)
        draft["items"].append("mine")

    return updater


def test_compare_and_swap_retries_and_contention(registry: Any) -> None:
    client = DatabaseStoreClient()
    store_id = f"cas-{uuid.uuid4().hex[:8]}"
    client.update_store(inbox, store_id, updater=lambda d: None)
    client.update_store(inbox, store_id, updater=_racing_updater(client, store_id, 2))
    assert _value(registry, "yieldstar_cas_retries_total", store="obs-inbox") == 2
    with yieldstar_settings(CAS_MAX_ATTEMPTS=1), pytest.raises(StoreContentionError):
        client.update_store(inbox, store_id, updater=_racing_updater(client, store_id, 1))
    assert _value(registry, "yieldstar_cas_retries_total", store="obs-inbox") == 3


def test_a_step_that_meets_contention_counts_it(registry: Any, yieldstar: YieldstarHelper) -> None:
    store_id = f"busy-{uuid.uuid4().hex[:8]}"
    with yieldstar_settings(CAS_MAX_ATTEMPTS=1):
        eid = start_workflow("obs.contended", store_id)
        yieldstar.run_until_idle()
    assert _value(registry, "yieldstar_store_contention_errors_total", store="obs-inbox") == 1
    assert _value(registry, "yieldstar_cas_retries_total", store="obs-inbox") == 1
    yieldstar.advance_time(60)
    yieldstar.run_until_idle()
    execution = Execution.objects.get(pk=eid)
    assert execution.status == "completed", execution.error_json


def _user(*permissions: str) -> User:
    user = User.objects.create_user(f"u-{uuid.uuid4().hex[:6]}", password="pw")
    for codename in permissions:
        user.user_permissions.add(Permission.objects.get(codename=codename))
    return User.objects.get(pk=user.pk)  # permissions are cached per instance


def test_the_metrics_views(registry: Any) -> None:
    start_workflow("obs.steps", 1)
    request = RequestFactory().get("/metrics")
    request.user = AnonymousUser()
    with pytest.raises(PermissionDenied):
        views.metrics_view(request)
    request.user = _user()
    with pytest.raises(PermissionDenied):
        views.metrics_view(request)
    request.user = _user("view_execution")
    response = views.metrics_view(request)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    body = response.content.decode()
    assert 'yieldstar_executions_started_total{workflow="obs.steps"} 1.0' in body
    assert "yieldstar_outbox_depth" in body
    request.user = AnonymousUser()
    assert views.public_metrics_view(request).status_code == 200
    post = RequestFactory().post("/metrics")
    post.user = AnonymousUser()
    assert views.public_metrics_view(post).status_code == 405
    with yieldstar_settings(METRICS=False):
        assert views.public_metrics_view(request).status_code == 404


def test_metrics_off_count_nothing(registry: Any, yieldstar: YieldstarHelper) -> None:
    with yieldstar_settings(METRICS=False):
        assert not metrics.enabled()
        start_workflow("obs.steps", 2)
        yieldstar.run_until_idle()
    assert _value(registry, "yieldstar_executions_started_total", workflow="obs.steps") == 0
    assert _value(registry, "yieldstar_step_duration_seconds_count", kind="run") == 0


def test_threads_that_first_count_at_once_make_the_metrics_once(
    registry: Any, monkeypatch: Any
) -> None:
    """The first use of metrics in a process makes them in its registry; threads that
    first count at once (a producer's threads, a threaded server) get the same metrics
    instead of registering each name twice (``DuplicateTimeseries``, which failed the
    hand-over of wakes)."""
    import threading

    made = metrics._Metrics

    class Slow(made):  # type: ignore[misc,valid-type]
        def __init__(self, registry: Any) -> None:
            time.sleep(0.2)  # the other threads arrive while these are being made
            super().__init__(registry)

    monkeypatch.setattr(metrics, "_Metrics", Slow)
    metrics._state.generation = -1
    found: list[Any] = []
    errors: list[BaseException] = []

    def first_count() -> None:
        try:
            found.append(metrics._metrics())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=first_count) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(found) == 4 and len({id(m) for m in found}) == 1
