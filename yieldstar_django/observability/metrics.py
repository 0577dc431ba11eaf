"""Prometheus metrics of the runtime, named ``yieldstar_*``.

======================================================  =========  ============================
name                                                    type       labels
======================================================  =========  ============================
``yieldstar_executions_started_total``                  counter    ``workflow``
``yieldstar_executions_finished_total``                 counter    ``workflow``, ``status``
``yieldstar_step_duration_seconds``                     histogram  ``kind``
``yieldstar_wake_latency_seconds``                      histogram  (a commit's wake to the
                                                                   resumed step's record)
``yieldstar_outbox_depth``                              gauge      (due, unacknowledged intents)
``yieldstar_outbox_oldest_age_seconds``                 gauge      (the oldest of those)
``yieldstar_lease_takeovers_total``                     counter    (takeover timers delivered)
``yieldstar_cas_retries_total``                         counter    ``store``
``yieldstar_store_contention_errors_total``             counter    ``store``
``yieldstar_relay_lag_seconds``                         histogram  (due time to the relay's
                                                                   claim)
======================================================  =========  ============================

They are registered in ``METRICS_REGISTRY`` (prometheus-client's default registry unless
configured). The two outbox gauges are read from the database at scrape time
(:class:`OutboxCollector`), by whichever process is scraped. Under Celery's prefork pool,
set ``PROMETHEUS_MULTIPROC_DIR`` (prometheus-client's multiprocess mode): the pool
processes write their samples there and :func:`exposition` reads them all.

With ``YIELDSTAR["METRICS"]`` ``False``, or with ``prometheus_client`` not importable,
nothing of it is imported and every hook returns after one comparison.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Iterator
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Final

from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.utils.dateparse import parse_datetime

from ..conf import database_alias, yieldstar_settings
from ..sql import queries

logger = logging.getLogger("yieldstar_django.metrics")

__all__ = [
    "OutboxCollector",
    "cas_retry",
    "contention_error",
    "enabled",
    "execution_finished",
    "execution_started",
    "exposition",
    "lease_takeovers",
    "relay_lag",
    "step_duration",
    "wake_latency",
    "woken_at",
]

#: The Celery header carrying the time (``time.time()``) a commit's wake was published.
WOKEN_AT_HEADER: Final = "yieldstar_woken_at"

#: When the commit that woke the current resume published its wake (``time.time()``), until
#: its first resumed step is recorded.
woken_at: ContextVar[float | None] = ContextVar("yieldstar_woken_at", default=None)

#: Buckets of the latencies (seconds): a few milliseconds to minutes.
LATENCY_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
#: Buckets of step durations (seconds).
STEP_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60)


class _Metrics:
    """The metrics, made in one registry once metrics are on."""

    def __init__(self, registry: Any) -> None:
        import prometheus_client as p

        self.started = p.Counter(
            "yieldstar_executions_started",
            "Executions created, by workflow.",
            ["workflow"],
            registry=registry,
        )
        self.finished = p.Counter(
            "yieldstar_executions_finished",
            "Executions that completed or failed, by workflow and status.",
            ["workflow", "status"],
            registry=registry,
        )
        self.step_duration = p.Histogram(
            "yieldstar_step_duration_seconds",
            "Time to execute a step (replays not counted), by step kind.",
            ["kind"],
            buckets=STEP_BUCKETS,
            registry=registry,
        )
        #: ``step_duration``'s child of each kind (a ``labels()`` lookup each step costs).
        self.step_kinds: dict[str, Any] = {}
        self.wake_latency = p.Histogram(
            "yieldstar_wake_latency_seconds",
            "From the commit that woke an execution to the record of its resumed step.",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.takeovers = p.Counter(
            "yieldstar_lease_takeovers",
            "Lease takeover timers delivered: runs whose worker stopped renewing its lease.",
            registry=registry,
        )
        self.cas_retries = p.Counter(
            "yieldstar_cas_retries",
            "Store commits that lost a compare-and-swap race and were tried again, by store.",
            ["store"],
            registry=registry,
        )
        self.contention = p.Counter(
            "yieldstar_store_contention_errors",
            "Store writes that reached CAS_MAX_ATTEMPTS (StoreContentionError), by store.",
            ["store"],
            registry=registry,
        )
        self.relay_lag = p.Histogram(
            "yieldstar_relay_lag_seconds",
            "From the time a wake intent was due to the relay's claim of it.",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.outbox = OutboxCollector()
        if registry is not None:
            registry.register(self.outbox)


class _State:
    generation = -1
    metrics: _Metrics | None = None
    #: The metrics made, by registry: a registry takes each name once.
    made: weakref.WeakKeyDictionary[Any, _Metrics] = weakref.WeakKeyDictionary()
    #: Held while metrics are made: threads of one process that first count at once would
    #: each register the same names (``DuplicateTimeseries``).
    lock = threading.Lock()


_state = _State()


def _metrics() -> _Metrics | None:
    if _state.generation == yieldstar_settings.generation:
        return _state.metrics
    setting = yieldstar_settings.METRICS
    made: _Metrics | None = None
    if setting is not False:
        try:
            import prometheus_client
        except ImportError as exc:
            if setting is True:
                raise ImproperlyConfigured(
                    'YIELDSTAR["METRICS"] is True but prometheus-client is not installed: '
                    "pip install 'yieldstar-django[prometheus]'"
                ) from exc
        else:
            registry = registry_in_use(prometheus_client)
            with _State.lock:
                made = _State.made.get(registry)
                if made is None:
                    made = _State.made[registry] = _Metrics(registry)
    _state.metrics, _state.generation = made, yieldstar_settings.generation
    return made


def registry_in_use(prometheus_client: Any) -> Any:
    """``METRICS_REGISTRY``, or prometheus-client's default registry."""
    registry = yieldstar_settings.import_setting("METRICS_REGISTRY")
    return prometheus_client.REGISTRY if registry is None else registry


def enabled() -> bool:
    """Whether metrics are recorded."""
    return _metrics() is not None


def execution_started(workflow: str) -> None:
    m = _metrics()
    if m is not None:
        m.started.labels(workflow).inc()


def execution_finished(workflow: str, status: str) -> None:
    m = _metrics()
    if m is not None:
        m.finished.labels(workflow, status).inc()


def step_duration(kind: str, seconds: float) -> None:
    m = _metrics()
    if m is not None:
        child = m.step_kinds.get(kind)
        if child is None:
            child = m.step_kinds[kind] = m.step_duration.labels(kind)
        child.observe(seconds)


def wake_latency() -> None:
    """Observe the time since the commit that woke the current resume (if a commit's wake
    did), once per resume."""
    at = woken_at.get()
    if at is None:
        return
    woken_at.set(None)
    m = _metrics()
    if m is not None:
        m.wake_latency.observe(max(0.0, time.time() - at))


def lease_takeovers(count: int) -> None:
    m = _metrics()
    if m is not None and count:
        m.takeovers.inc(count)


def cas_retry(store: str) -> None:
    m = _metrics()
    if m is not None:
        m.cas_retries.labels(store).inc()


def contention_error(store: str) -> None:
    m = _metrics()
    if m is not None:
        m.contention.labels(store).inc()


def relay_lag(seconds: float) -> None:
    m = _metrics()
    if m is not None:
        m.relay_lag.observe(max(0.0, seconds))


#: Whether the wakes the ``WAKE_BACKEND`` is handed now come from a commit (not the relay):
#: set by ``wakes.delivery.publish``.
from_commit: ContextVar[bool] = ContextVar("yieldstar_wake_from_commit", default=False)


def wake_headers() -> dict[str, float]:
    """The header of a commit's wake: when it was published (nothing with metrics off, or
    for the relay's wakes)."""
    if not from_commit.get() or _metrics() is None:
        return {}
    return {WOKEN_AT_HEADER: time.time()}


class OutboxCollector:
    """``yieldstar_outbox_depth`` and ``yieldstar_outbox_oldest_age_seconds``, read from the
    database (``DATABASE_ALIAS``) at each scrape: the wake intents due (an immediate wake
    since it was written, a timer since its time) and not acknowledged yet (no run of their
    execution started since), and how long the oldest has been due. A database error leaves
    both out of that scrape (logged)."""

    def describe(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        yield GaugeMetricFamily("yieldstar_outbox_depth", _DEPTH_HELP)
        yield GaugeMetricFamily("yieldstar_outbox_oldest_age_seconds", _AGE_HELP)

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        from .. import clock

        try:
            depth, oldest = _outbox_depth(clock.now())
        except Exception:
            logger.warning("could not read the outbox's depth", exc_info=True)
            return
        yield GaugeMetricFamily("yieldstar_outbox_depth", _DEPTH_HELP, value=depth)
        age = 0.0 if oldest is None else max(0.0, (clock.now() - oldest).total_seconds())
        yield GaugeMetricFamily("yieldstar_outbox_oldest_age_seconds", _AGE_HELP, value=age)


_DEPTH_HELP: Final = "Wake intents due and not acknowledged yet (no run started since)."
_AGE_HELP: Final = "How long the oldest due, unacknowledged wake intent has been due."


def _outbox_depth(now: datetime) -> tuple[int, datetime | None]:
    connection = connections[database_alias()]
    with connection.cursor() as cursor:
        cursor.execute(
            queries.of(connection).outbox_depth,
            [connection.ops.adapt_datetimefield_value(now)],
        )
        count, oldest = cursor.fetchone()
    if isinstance(oldest, str):  # SQLite: the column's text
        oldest = parse_datetime(oldest)
    if isinstance(oldest, datetime) and oldest.tzinfo is None:
        oldest = oldest.replace(tzinfo=UTC)
    return int(count), oldest


def exposition() -> tuple[bytes, str]:
    """The metrics in Prometheus' text format and its content type: the configured
    registry's, or in multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``) every process's
    samples with the outbox gauges."""
    import prometheus_client as p

    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = p.CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        registry.register(OutboxCollector())
    else:
        _metrics()
        registry = registry_in_use(p)
    return p.generate_latest(registry), p.CONTENT_TYPE_LATEST
