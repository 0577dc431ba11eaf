"""Observability: the cost of traces and metrics on durable steps.

- **durable steps per second, tracing and metrics on** against **both off**: ``step.run``
  steps of one execution run in this process (as ``runtime``'s one-execution row), with
  ``TRACING`` and ``METRICS`` on, the OpenTelemetry SDK's tracer provider recording every
  span into a batch processor (its exporter drops them: what leaves the process is the
  exporter's cost, not ours) and prometheus-client's default registry; against both
  ``False``. Three rounds each, interleaved (on, off, on, off, ...), the median of each:
  target on >= 0.95x off.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from .runtime import _setup_django, _yieldstar, steps_in_one_execution
from .table import Row

SUITE = "observability"


def _install_tracer_provider() -> None:
    """The SDK on the global tracer provider (once), as an application sets it up."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class Dropped(SpanExporter):
        exported = 0

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            Dropped.exported += len(spans)
            return SpanExportResult.SUCCESS

    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    trace.set_tracer_provider(provider)


def run(quick: bool = False) -> list[Row]:
    _setup_django()
    _install_tracer_provider()
    steps = 300 if quick else 1000
    rounds = 3
    on: list[float] = []
    off: list[float] = []
    with _yieldstar(TRACING=True, METRICS=True):
        steps_in_one_execution(50)  # warm up both paths
    with _yieldstar(TRACING=False, METRICS=False):
        steps_in_one_execution(50)
    for _ in range(rounds):
        with _yieldstar(TRACING=True, METRICS=True):
            on.append(steps_in_one_execution(steps))
        with _yieldstar(TRACING=False, METRICS=False):
            off.append(steps_in_one_execution(steps))
    median_on, median_off = statistics.median(on), statistics.median(off)
    note = f"{steps} steps/round; on {_rounded(on)}, off {_rounded(off)}"
    return [
        Row(
            SUITE,
            "durable steps/s, tracing + metrics on",
            median_on,
            "both off",
            median_off,
            "steps/s",
            target=">= 0.95x",
            note=note,
        )
    ]


def _rounded(values: Any) -> str:
    return "/".join(f"{v:.0f}" for v in values)
