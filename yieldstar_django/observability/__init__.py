"""Traces and metrics of the runtime: OpenTelemetry spans (:mod:`.tracing`), Prometheus
metrics (:mod:`.metrics`) and the ``/metrics`` view (:mod:`.views`).

Both are optional: each is on when its library is importable, unless ``YIELDSTAR["TRACING"]``
or ``YIELDSTAR["METRICS"]`` turns it off. Off, or without the library, neither module imports
anything of it, and every hook is one comparison and a shared no-op object. See
``docs/operations/observability.md``.
"""
