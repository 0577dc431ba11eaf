"""The yieldstar pytest plugin (registered through the ``pytest11`` entry point).

Fixture ``yieldstar``: the inline wake backend for the test, the clock reset afterwards,
and ``run_until_idle()`` / ``advance_time()`` as methods. Combine it with pytest-django's
``db`` (one transaction, like ``TestCase``) or ``transactional_db``::

    def test_ships(db, yieldstar):
        execution_id = start_workflow(ship_next, "w1")
        yieldstar.run_until_idle()

After every test the plugin puts the timers' clock back on wall-clock time if a test moved
it (with the fixture, or with the bare ``advance_time``), so no test runs on another's clock.

Imports nothing of Django until a fixture runs, so it costs nothing in other projects.
"""

from __future__ import annotations

import sys
from collections.abc import Generator, Iterator

import pytest

from .helpers import TimeHelpers

__all__ = ["YieldstarHelper", "pytest_report_header", "pytest_runtest_teardown", "yieldstar"]


class YieldstarHelper(TimeHelpers):
    """What the ``yieldstar`` fixture returns."""


@pytest.fixture
def yieldstar() -> Iterator[YieldstarHelper]:
    """The inline wake backend for this test; the clock reset afterwards."""
    from .. import clock
    from .cases import inline_settings

    with inline_settings():
        try:
            yield YieldstarHelper()
        finally:
            clock.reset()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    """Once a test's fixtures are torn down, put the clock back if the test moved it."""
    yield
    clock = sys.modules.get("yieldstar_django.clock")  # not imported: nothing moved it
    if clock is not None:
        clock.reset()


def pytest_report_header(config: pytest.Config) -> str | None:
    """Say so when the configured wake backend would publish to a Celery broker."""
    try:
        from django.conf import settings

        if not settings.configured:
            return None
        configured = getattr(settings, "YIELDSTAR", None) or {}
        backend = configured.get("WAKE_BACKEND", "yieldstar_django.wakes.celery_backend")
    except Exception:
        return None
    if backend != "yieldstar_django.wakes.celery_backend" or configured.get("PUBLISH_IN_TESTS"):
        return None
    return (
        "yieldstar: WAKE_BACKEND is the Celery backend; outside the `yieldstar` fixture it "
        "refuses to publish during tests (BrokerInTestsError) unless PUBLISH_IN_TESTS is set"
    )
