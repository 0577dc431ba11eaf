"""Workflows of the runtime benchmark (autodiscovered by its worker)."""

from __future__ import annotations

import functools
from collections.abc import Generator
from typing import Any

from yieldstar_django.core.definition import define_store
from yieldstar_django.runtime import Step, workflow
from yieldstar_django.runtime.queues import define_queue

inbox = define_store("bench.inbox", None, initial=lambda id: {"items": []})
#: Any state, no schema: what the bounds suite writes through the HTTP API.
anything = define_store("bench.anything", None, initial=lambda id: {})


def first_item(state: Any) -> Any:
    return state["items"][0] if state["items"] else None


def pop_first(draft: Any, selected: Any) -> None:
    draft["items"].pop(0)


def noop(i: int) -> int:
    return i


def spanned(i: int) -> int:
    """``noop`` making one OpenTelemetry span (started and ended, no attributes) with the
    global tracer provider: the least a span per step costs (``bench.observability``)."""
    _tracer().start_span("bench.step").end()
    return i


@functools.cache
def _tracer() -> Any:
    from opentelemetry import trace

    return trace.get_tracer("bench")


@workflow("bench.wait_take")
def wait_take(step: Step, store_id: str) -> Any:
    """Wait on a take from ``inbox/<store_id>``; the take's heap row times the wake."""
    return (yield from step.take(inbox, store_id, first_item, pop_first))


@workflow("bench.steps")
def steps(step: Step, n: int) -> Generator[Any, Any, int]:
    """``n`` durable ``run`` steps."""
    total = 0
    for i in range(n):
        total += yield from step.run(noop, i)
    return total


@workflow("bench.spanned_steps")
def spanned_steps(step: Step, n: int) -> Generator[Any, Any, int]:
    """``n`` durable ``run`` steps, each function making one bare span (``spanned``)."""
    total = 0
    for i in range(n):
        total += yield from step.run(spanned, i)
    return total


def write_row(execution_id: str, index: int) -> int:
    """Write one row of a project's own table (``tests.shared.models.Entry``); its id."""
    from tests.shared.models import Entry

    return int(Entry.objects.create(execution_id=execution_id, step=str(index), token="bench").pk)


@workflow("bench.atomic_rows")
def atomic_rows(step: Step, n: int) -> Generator[Any, Any, int]:
    """``n`` ``step.atomic`` steps, each writing one row in its step's transaction."""
    for i in range(n):
        yield from step.atomic(write_row, step.execution_id, i)
    return n


@workflow("bench.run_rows")
def run_rows(step: Step, n: int) -> Generator[Any, Any, int]:
    """``n`` ``step.run`` steps, each writing the same row (committed on its own)."""
    for i in range(n):
        yield from step.run(write_row, step.execution_id, i)
    return n


#: The queues suite's queues (``bench.queues``).
short_queue = define_queue("bench.short", concurrency=50)
debounce_queue = define_queue("bench.debounce")


@workflow("bench.short")
def short(step: Step, i: int) -> Generator[Any, Any, int]:
    """A short execution: one durable ``run`` step."""
    return (yield from step.run(noop, i))


@workflow("bench.child")
def child(step: Step, i: int) -> Generator[Any, Any, int]:
    """One durable ``run`` step: a child of ``bench.fan_out``."""
    return (yield from step.run(noop, i))


@workflow("bench.fan_out")
def fan_out(step: Step, n: int) -> Generator[Any, Any, int]:
    """Start ``n`` children of ``bench.child`` in one step and gather them."""
    ids = yield from step.start_many(child, [[i] for i in range(n)])
    results = yield from step.gather(ids)
    return sum(results)
