"""``TimeHelpers``: ``run_until_idle``, ``run_until_complete`` and ``advance_time`` as
methods, for the ``yieldstar`` pytest fixture and ``YieldstarTestMixin``.

Imports nothing of Django until a method runs (the pytest plugin imports this module).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..models.runtime import Execution

__all__ = ["TimeHelpers"]


class TimeHelpers:
    """The testing helpers of :mod:`yieldstar_django.testing.runner`, as methods."""

    def run_until_idle(
        self,
        timeout: float = 10.0,
        *,
        skip_timers: bool = False,
        max_time: float | timedelta | None = None,
    ) -> int:
        """See :func:`yieldstar_django.testing.run_until_idle`."""
        from .runner import run_until_idle

        return run_until_idle(timeout, skip_timers=skip_timers, max_time=max_time)

    def run_until_complete(
        self,
        execution_id: str,
        *,
        skip_timers: bool = True,
        max_time: float | timedelta | None = None,
        timeout: float = 10.0,
    ) -> Execution:
        """See :func:`yieldstar_django.testing.run_until_complete`."""
        from .runner import run_until_complete

        return run_until_complete(
            execution_id, skip_timers=skip_timers, max_time=max_time, timeout=timeout
        )

    def advance_time(self, seconds: float | timedelta) -> None:
        """See :func:`yieldstar_django.testing.advance_time`."""
        from .runner import advance_time

        advance_time(seconds)
