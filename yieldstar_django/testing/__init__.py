"""Testing workflows: run executions in the test process, and move time.

- :func:`inline`: a ``WAKE_BACKEND`` that runs a woken execution in this process once the
  waking transaction commits, with no broker;
- :func:`run_until_idle`: runs every execution that is due (wakes and timers) until none
  is, and returns how many runs it made (``UnregisteredWorkflowError`` when only
  executions whose workflow is not registered here are left);
- :func:`advance_time`: moves the clock that durable timers, ``step.sleep``,
  ``RetryableError`` delays and schedules read, and fires the schedules' due ticks;
- :class:`YieldstarTestMixin` for Django test cases, and the pytest fixture ``yieldstar``
  (:mod:`yieldstar_django.testing.pytest_plugin`, registered as a pytest plugin).

Nothing is mocked: executions run with ``run_execution`` against the test database, as a
Celery worker would run them. Names are imported on first access (PEP 562), so loading
the pytest plugin imports neither Django nor Celery.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:  # pragma: no cover
    from ..wakes.guard import BrokerInTestsError
    from .cases import INLINE, YieldstarTestMixin, inline_settings
    from .runner import UnregisteredWorkflowError, advance_time, inline, run_until_idle

_LAZY: dict[str, str] = {
    "INLINE": ".cases",
    "YieldstarTestMixin": ".cases",
    "inline_settings": ".cases",
    "BrokerInTestsError": "..wakes.guard",
    "UnregisteredWorkflowError": ".runner",
    "advance_time": ".runner",
    "inline": ".runner",
    "run_until_idle": ".runner",
}

__all__ = [
    "INLINE",
    "BrokerInTestsError",
    "UnregisteredWorkflowError",
    "YieldstarTestMixin",
    "advance_time",
    "inline",
    "inline_settings",
    "run_until_idle",
]


__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)
