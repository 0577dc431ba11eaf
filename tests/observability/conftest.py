"""Fixtures of the traces and metrics tests: the OpenTelemetry SDK's in-memory exporter on
the global tracer provider (set once per process, as an application does), and a
Prometheus registry of each test's own."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from . import workflows  # noqa: F401  (registers the workflows)

_EXPORTER: Any = None


def _exporter() -> Any:
    global _EXPORTER
    if _EXPORTER is None:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        _EXPORTER = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    return _EXPORTER


@pytest.fixture
def spans() -> Iterator[Any]:
    """The in-memory exporter, emptied; ``spans.get_finished_spans()`` lists the spans."""
    exporter = _exporter()
    exporter.clear()
    yield exporter
    exporter.clear()


def yieldstar_settings(**more: object) -> override_settings:
    """``override_settings`` of ``YIELDSTAR`` with ``more`` keys (the others kept)."""
    current = getattr(settings, "YIELDSTAR", None) or {}
    return override_settings(YIELDSTAR={**current, **more})


@pytest.fixture
def registry() -> Iterator[Any]:
    """A ``CollectorRegistry`` of the test's own, as ``METRICS_REGISTRY``."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    with yieldstar_settings(METRICS_REGISTRY=registry):
        yield registry
