"""The guard that keeps tests from publishing wakes to a real Celery broker.

The Celery wake backend calls it on every publish; ``yieldstar_django.testing`` exports
``BrokerInTestsError``.
"""

from __future__ import annotations

from typing import Any

from django.test import utils

from ..celery_app import masked_broker_url
from ..conf import yieldstar_settings

__all__ = ["BrokerInTestsError", "in_test_environment", "refuse_in_tests"]


class BrokerInTestsError(RuntimeError):
    """The Celery wake backend was asked to publish while tests run.

    A worker listening on that broker would run executions that exist only in the test
    database. Use ``yieldstar_django.testing.inline`` in tests, or set
    ``YIELDSTAR["PUBLISH_IN_TESTS"] = True`` for tests that run workers of their own.
    """


def in_test_environment() -> bool:
    """Whether Django's test environment is set up (``setup_test_environment()``, which
    ``manage.py test`` and pytest-django call)."""
    return hasattr(utils._TestState, "saved_data")


def refuse_in_tests(app: Any) -> None:
    """Raise ``BrokerInTestsError`` if tests run and ``PUBLISH_IN_TESTS`` is not set."""
    if yieldstar_settings.PUBLISH_IN_TESTS or not in_test_environment():
        return
    raise BrokerInTestsError(
        f"refusing to publish wakes to the Celery broker {masked_broker_url(app)} while tests run: "
        "a worker there would run executions of the test database. Set "
        "YIELDSTAR['WAKE_BACKEND'] = 'yieldstar_django.testing.inline' in test settings "
        "(the yieldstar pytest fixtures and YieldstarTestMixin do), or "
        "YIELDSTAR['PUBLISH_IN_TESTS'] = True if the tests run workers of their own."
    )
