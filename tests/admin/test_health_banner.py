"""The admin index's banner of failing health checks (``yieldstar_django/admin/health.py``,
the ``yieldstar_health_banner`` tag): shown to staff who may view executions when a check
fails, kept ``HEALTH_CACHE_SECONDS``, and hidden from staff who may not."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.test import Client

from tests.admin.conftest import count_queries
from yieldstar_django.admin.health import INDEX_TEMPLATE
from yieldstar_django.health import forget_cached_report
from yieldstar_django.models import RelayHeartbeat
from yieldstar_django.wakes import relay_log

BANNER = "yieldstar health:"


@pytest.fixture(autouse=True)
def _fresh_report() -> Iterator[None]:
    forget_cached_report()
    yield
    forget_cached_report()


def test_the_default_site_shows_the_banner_template() -> None:
    assert admin.site.index_template == INDEX_TEMPLATE


def test_the_banner_names_what_fails_and_goes_once_healthy(
    staff: Callable[[str], Client], settings: Any
) -> None:
    settings.YIELDSTAR = {**settings.YIELDSTAR, "HEALTH_CACHE_SECONDS": 0}
    client = staff("viewer")
    page = client.get("/admin/").content.decode()
    assert BANNER in page and "no relay has recorded a heartbeat" in page
    relay_log.heartbeat.beat("default", force=True)
    page = client.get("/admin/").content.decode()
    assert BANNER not in page


def test_the_report_is_kept_for_a_while(staff: Callable[[str], Client]) -> None:
    """With the default ``HEALTH_CACHE_SECONDS`` the second view runs no health query."""
    client = staff("viewer")
    first, page = count_queries(client, "/admin/")
    assert BANNER in page
    relay_log.heartbeat.beat("default", force=True)
    assert RelayHeartbeat.objects.exists()
    second, page = count_queries(client, "/admin/")
    assert BANNER in page  # the kept report, still failing
    assert second < first
    forget_cached_report()
    assert BANNER not in client.get("/admin/").content.decode()


def test_staff_who_may_not_view_executions_see_no_banner(db: None) -> None:
    user = User.objects.create_user("plain", password="pw", is_staff=True)
    client = Client()
    client.force_login(user)
    response = client.get("/admin/")
    assert response.status_code == 200
    assert BANNER not in response.content.decode()
