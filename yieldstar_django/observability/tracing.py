"""OpenTelemetry spans of the runtime, with the application's global tracer provider.

Spans: ``yieldstar.start`` (a start, from Python or HTTP), ``yieldstar.store.commit`` (a
store commit), ``yieldstar.wake`` (wakes handed to the wake backend), ``yieldstar.resume``
(the Celery resume task), ``yieldstar.run`` (one replay of an execution) and
``yieldstar.step`` (a step executed, with its kind, store, id, version, attempt and
outcome). An error is recorded on the span it ends (``record_exception`` and an error
status).

The W3C ``traceparent`` of a start is stored on its execution
(``Execution.trace_context``), and the one of a wake travels in the Celery message's
headers: a resume continues the trace of the commit that woke it, or, woken by a timer or
the relay, the trace of the execution's start; its runs link to that start. So one trace
follows a workflow from an HTTP request through the worker that resumes it.

With ``YIELDSTAR["TRACING"]`` ``False``, or with the OpenTelemetry API not importable,
nothing of it is imported: every function returns :data:`OFF` (a shared no-op span) or
``""`` after one comparison.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from contextvars import ContextVar
from importlib import metadata
from types import TracebackType
from typing import Any, Final

from django.core.exceptions import ImproperlyConfigured

from ..conf import yieldstar_settings

__all__ = [
    "OFF",
    "TRACEPARENT",
    "Span",
    "committed_version",
    "current_traceparent",
    "enabled",
    "span",
]

#: The header (and carrier key) of the W3C trace context.
TRACEPARENT: Final = "traceparent"

#: The version the last store commit of the current step committed (for its span).
committed_version: ContextVar[int | None] = ContextVar("yieldstar_committed_version", default=None)

#: The instrumentation scope's name.
SCOPE: Final = "yieldstar_django"

Attributes = Mapping[str, str | int | float | bool]


class _Off:
    """The span of tracing off: a context manager that does nothing."""

    __slots__ = ()

    def __enter__(self) -> _Off:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def set(self, key: str, value: str | int | float | bool | None) -> None:
        pass

    def error(self, exc: BaseException) -> None:
        pass


#: The one span of tracing off.
OFF: Final = _Off()


class _Api:
    """The OpenTelemetry names in use, imported once tracing is on."""

    def __init__(self) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.context = context
        self.trace = trace
        # Bound once: a span of every step calls them.
        self.attach = context.attach
        self.detach = context.detach
        self.in_context = trace.set_span_in_context
        self.propagator = TraceContextTextMapPropagator()
        # A proxy until the application sets its provider, then that provider's tracer.
        self.tracer = trace.get_tracer(SCOPE, _version())
        self.kinds = {
            "internal": trace.SpanKind.INTERNAL,
            "producer": trace.SpanKind.PRODUCER,
            "consumer": trace.SpanKind.CONSUMER,
        }
        self.error_status = trace.Status(trace.StatusCode.ERROR)


@functools.cache
def _version() -> str | None:
    """The package's version (read from its metadata once: a tracer is made again after
    each settings reload)."""
    try:
        return metadata.version("yieldstar-django")
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a checkout
        return None


class _State:
    generation = -1
    api: _Api | None = None


_state = _State()


def _api() -> _Api | None:
    """The API when tracing is on, else ``None`` (decided again after a settings reload)."""
    if _state.generation == yieldstar_settings.generation:
        return _state.api
    setting = yieldstar_settings.TRACING
    api: _Api | None = None
    if setting is not False:
        try:
            api = _Api()
        except ImportError as exc:
            if setting is True:
                raise ImproperlyConfigured(
                    'YIELDSTAR["TRACING"] is True but the OpenTelemetry API is not '
                    "installed: pip install 'yieldstar-django[otel]'"
                ) from exc
    _state.api, _state.generation = api, yieldstar_settings.generation
    return api


def enabled() -> bool:
    """Whether spans are made."""
    return _api() is not None


class Span:
    """A span made current while the ``with`` block runs; ends with the block. An
    exception leaving the block is recorded on it (but one of ``quiet``: the runtime's
    control flow, a suspension, say)."""

    __slots__ = ("_api", "_attributes", "_kind", "_links", "_name", "_parent", "_quiet", "_span",
                 "_token")  # fmt: skip

    def __init__(
        self,
        api: _Api,
        name: str,
        attributes: Attributes | None,
        parent: str,
        links: tuple[str, ...],
        kind: str,
        quiet: tuple[type[BaseException], ...],
    ) -> None:
        self._api = api
        self._name = name
        self._attributes = attributes
        self._parent = parent
        self._links = links
        self._kind = kind
        self._quiet = quiet
        self._span: Any = None
        self._token: Any = None

    def __enter__(self) -> Span:
        api = self._api
        if self._parent or self._links:
            self._span = self._start_remote(api)
        else:  # a step's span: as little as the SDK needs
            self._span = api.tracer.start_span(
                self._name, kind=api.kinds[self._kind], attributes=self._attributes
            )
        self._token = api.attach(api.in_context(self._span))
        return self

    def _start_remote(self, api: _Api) -> Any:
        """The span, a child of ``parent`` and linked to ``links`` (valid ones)."""
        parent = _extract(api, self._parent) if self._parent else None
        links = []
        for traceparent in self._links:
            linked = _span_context(api, traceparent)
            if linked is not None:
                links.append(api.trace.Link(linked))
        return api.tracer.start_span(
            self._name,
            context=parent,
            kind=api.kinds[self._kind],
            attributes=self._attributes,
            links=links or None,
        )

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc is not None and not isinstance(exc, self._quiet):
                self.error(exc)
        finally:
            self._api.detach(self._token)
            self._span.end()

    def set(self, key: str, value: str | int | float | bool | None) -> None:
        """Set an attribute (``None`` sets nothing)."""
        if value is not None:
            self._span.set_attribute(key, value)

    def error(self, exc: BaseException) -> None:
        """Record ``exc`` on the span and mark it failed. An exception whose ``str()``
        (or traceback) cannot be formatted is recorded by its type alone: tracing never
        replaces the workflow's error with its own."""
        try:
            self._span.record_exception(exc)
        except Exception:
            self._span.add_event("exception", {"exception.type": type(exc).__qualname__})
        self._span.set_status(self._api.error_status)


def span(
    name: str,
    attributes: Attributes | None = None,
    *,
    parent: str = "",
    links: tuple[str, ...] = (),
    kind: str = "internal",
    quiet: tuple[type[BaseException], ...] = (),
) -> Span | _Off:
    """A span named ``name`` (a context manager), a child of the current span, or of the
    ``traceparent`` ``parent`` when given (and valid); :data:`OFF` with tracing off."""
    api = _api()
    if api is None:
        return OFF
    return Span(api, name, attributes, parent, links, kind, quiet)


def current_traceparent() -> str:
    """The W3C ``traceparent`` of the current span; ``""`` with tracing off or no valid
    span current."""
    api = _api()
    if api is None:
        return ""
    carrier: dict[str, str] = {}
    api.propagator.inject(carrier)
    return carrier.get(TRACEPARENT, "")


def _extract(api: _Api, traceparent: str) -> Any:
    return api.propagator.extract({TRACEPARENT: traceparent})


def _span_context(api: _Api, traceparent: str) -> Any:
    """The remote span context of ``traceparent``, or ``None`` if it is not valid."""
    context = api.trace.get_current_span(_extract(api, traceparent)).get_span_context()
    return context if context.is_valid else None
