"""``YieldstarTestMixin``: the testing helpers for Django ``TestCase`` classes."""

from __future__ import annotations

from django.conf import settings
from django.test.utils import override_settings

from .. import clock
from .helpers import TimeHelpers

__all__ = ["INLINE", "YieldstarTestMixin", "inline_settings"]

#: The dotted path of the inline wake backend.
INLINE = "yieldstar_django.testing.inline"


def inline_settings() -> override_settings:
    """``override_settings`` of ``YIELDSTAR`` with the inline wake backend (other keys kept)."""
    current = getattr(settings, "YIELDSTAR", None) or {}
    return override_settings(YIELDSTAR={**current, "WAKE_BACKEND": INLINE})


class YieldstarTestMixin(TimeHelpers):
    """Mix into a ``TestCase`` or ``TransactionTestCase``: each test runs with the inline
    wake backend and a clock back on wall-clock time afterwards.

    In a ``TransactionTestCase`` a woken execution runs as soon as the waking write
    commits; in a ``TestCase`` (one transaction that never commits) call
    :meth:`run_until_idle`, which runs the wakes the transaction holds back. Both run due
    timers after :meth:`advance_time`. Call ``super().setUp()`` if you override ``setUp``.
    """

    def setUp(self) -> None:
        super().setUp()  # type: ignore[misc]
        overridden = inline_settings()
        overridden.enable()
        self.addCleanup(overridden.disable)  # type: ignore[attr-defined]
        self.addCleanup(clock.reset)  # type: ignore[attr-defined]
