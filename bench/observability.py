"""Observability: the cost of traces and metrics on durable steps.

- **durable steps per second, tracing and metrics on** against **both off**: ``step.run``
  steps of one execution run in this process (as ``runtime``'s one-execution row), with
  ``TRACING`` and ``METRICS`` on, the OpenTelemetry SDK's tracer provider recording every
  span into a batch processor (its exporter drops them: what leaves the process is the
  exporter's cost, not ours) and prometheus-client's default registry; against both
  ``False``. Target: on >= 0.95x off.
- **a bare SDK span per step** against **both off**: the same steps with both off, each
  step's function starting and ending one span of the same provider (no attributes, not
  made current): the least any span per step costs on this machine, whoever makes it.

Eleven rounds (three with ``--quick``) of each, interleaved, the order of the modes turning
each round so none always runs first; the median of each mode (and, in the note, the median
of each round's own ratio, which a machine's load drifting from round to round moves less).
``RUN_SLICE_SECONDS`` is ``None`` in every mode, so a slow round on a busy machine is not cut
into several runs.
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


#: The modes measured: settings, and the workflow of their steps.
MODES: dict[str, tuple[dict[str, Any], str]] = {
    "on": ({"TRACING": True, "METRICS": True}, "bench.steps"),
    "off": ({"TRACING": False, "METRICS": False}, "bench.steps"),
    "bare span": ({"TRACING": False, "METRICS": False}, "bench.spanned_steps"),
}


def run(quick: bool = False) -> list[Row]:
    _setup_django()
    _install_tracer_provider()
    steps = 200 if quick else 500
    rounds = 3 if quick else 11
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    names = list(MODES)
    for mode in names:  # warm up every path
        _steps(mode, 50)
    for i in range(rounds):
        for mode in names[i % len(names) :] + names[: i % len(names)]:
            rates[mode].append(_steps(mode, steps))
    median = {mode: statistics.median(values) for mode, values in rates.items()}
    note = f"{steps} steps/round, {rounds} rounds; " + ", ".join(
        f"{mode} {_rounded(values)}" for mode, values in rates.items()
    )
    note += f"; median of rounds' ratios {_paired(rates['on'], rates['off']):.2f}x"
    return [
        Row(
            SUITE,
            "durable steps/s, tracing + metrics on",
            median["on"],
            "both off",
            median["off"],
            "steps/s",
            target=">= 0.95x",
            note=note,
        ),
        Row(
            SUITE,
            "durable steps/s, a bare SDK span per step (both off)",
            median["bare span"],
            "both off",
            median["off"],
            "steps/s",
            note="the least a span per step costs: started and ended, no attributes, not "
            f"current; median of rounds' ratios {_paired(rates['bare span'], rates['off']):.2f}x",
        ),
    ]


def _steps(mode: str, n: int) -> float:
    values, workflow = MODES[mode]
    with _yieldstar(**values, RUN_SLICE_SECONDS=None):
        return steps_in_one_execution(n, workflow)


def _paired(values: list[float], baselines: list[float]) -> float:
    return statistics.median(v / b for v, b in zip(values, baselines, strict=True))


def _rounded(values: Any) -> str:
    return "/".join(f"{v:.0f}" for v in values)
