"""Testing workflows: run executions in the test process, and move time.

- :func:`inline`: a ``WAKE_BACKEND`` that runs a woken execution in this process once the
  waking transaction commits, with no broker;
- :func:`run_until_idle`: runs every execution that is due (wakes and timers) until none
  is, and returns how many runs it made (``UnregisteredWorkflowError`` when only
  executions whose workflow is not registered here are left);
- :func:`run_until_complete`: runs until one execution finishes, moving the clock to each
  next timer by itself (``skip_timers``), as Temporal's time-skipping environment does;
  ``run_until_idle(skip_timers=True)`` does the same until no timer is left;
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
    from .runner import (
        ExecutionNotFinishedError,
        UnregisteredWorkflowError,
        advance_time,
        inline,
        next_timer,
        run_until_complete,
        run_until_idle,
    )

_LAZY: dict[str, str] = {
    "INLINE": ".cases",
    "YieldstarTestMixin": ".cases",
    "inline_settings": ".cases",
    "BrokerInTestsError": "..wakes.guard",
    "ExecutionNotFinishedError": ".runner",
    "UnregisteredWorkflowError": ".runner",
    "advance_time": ".runner",
    "inline": ".runner",
    "next_timer": ".runner",
    "run_until_complete": ".runner",
    "run_until_idle": ".runner",
}

__all__ = [
    "INLINE",
    "BrokerInTestsError",
    "ExecutionNotFinishedError",
    "UnregisteredWorkflowError",
    "YieldstarTestMixin",
    "advance_time",
    "inline",
    "inline_settings",
    "next_timer",
    "run_until_complete",
    "run_until_idle",
]


__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)
