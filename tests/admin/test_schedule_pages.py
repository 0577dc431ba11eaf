"""The schedule admin: create (bad input is a form error, nothing stored), list, pause,
resume, trigger now; a schedule defined in code is read-only; the executions list filters
by schedule."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from yieldstar_django import define_schedule
from yieldstar_django.models import Execution, Schedule
from yieldstar_django.runtime import start_workflow
from yieldstar_django.runtime.schedule_specs import unregister_schedule
from yieldstar_django.runtime.schedules import create_schedule, sync_code_schedules

from ..api import workflows  # noqa: F401  (registers api-test-greet)

pytestmark = pytest.mark.django_db

ADD = reverse("admin:yieldstar_schedule_add")
LIST = reverse("admin:yieldstar_schedule_changelist")


def form(**fields: Any) -> dict[str, Any]:
    return {
        "name": "from-admin",
        "workflow_id": "api-test-greet",
        "cron": "",
        "every_seconds": "",
        "timezone": "UTC",
        "args": '["admin"]',
        "kwargs": "{}",
        "catch_up": "latest",
        **fields,
    }


def test_a_schedule_created_in_the_admin_is_checked_and_stored(admin_client: Client) -> None:
    response = admin_client.post(ADD, form(cron="*/5 * * * *", timezone="Asia/Tokyo"))
    assert response.status_code == 302, response.content.decode()[:2000]
    row = Schedule.objects.get(name="from-admin")
    assert row.cron == "*/5 * * * *" and row.timezone == "Asia/Tokyo" and not row.in_code
    assert row.next_tick_at is not None and row.input_json == '{"args":["admin"],"kwargs":{}}'


@pytest.mark.parametrize(
    "fields",
    [
        {"cron": "99 * * * *"},
        {"cron": "* * * * *", "every_seconds": "60"},
        {},
        {"every_seconds": "60", "timezone": "Atlantis/Capital"},
        {"every_seconds": "60", "args": "[1, 2, 3]"},
        {"every_seconds": "60", "args": "not json"},
    ],
)
def test_bad_input_in_the_admin_is_a_form_error(admin_client: Client, fields: Any) -> None:
    response = admin_client.post(ADD, form(**fields))
    assert response.status_code == 200
    assert b"errornote" in response.content or b"errorlist" in response.content
    assert not Schedule.objects.exists()


def test_pause_resume_and_trigger_now_actions(admin_client: Client) -> None:
    create_schedule("admin-hourly", "api-test-greet", every=3600, args=["a"])
    pk = Schedule.objects.get(name="admin-hourly").pk
    for action, paused in (("pause", True), ("resume", False)):
        response = admin_client.post(LIST, {"action": action, "_selected_action": [pk]})
        assert response.status_code == 302
        assert Schedule.objects.get(pk=pk).paused is paused
    admin_client.post(LIST, {"action": "trigger_now", "_selected_action": [pk]})
    [execution] = Execution.objects.filter(schedule="admin-hourly")
    assert execution.id.startswith("schedule:admin-hourly:now:")
    page = admin_client.get(LIST)
    assert b"admin-hourly" in page.content and b"every 3600 s" in page.content


@pytest.fixture
def in_code() -> Iterator[str]:
    define_schedule("admin-code", "api-test-greet", every=60, args=["c"])
    sync_code_schedules()
    yield "admin-code"
    unregister_schedule("admin-code")


def test_a_schedule_defined_in_code_is_read_only(admin_client: Client, in_code: str) -> None:
    row = Schedule.objects.get(name=in_code)
    url = reverse("admin:yieldstar_schedule_change", args=[row.pk])
    page = admin_client.get(url)
    assert page.status_code == 200
    admin_client.post(url, form(name=in_code, every_seconds="5"))
    assert Schedule.objects.get(pk=row.pk).every_seconds == 60


def test_the_executions_list_filters_by_schedule(admin_client: Client) -> None:
    create_schedule("admin-filter", "api-test-greet", every=3600, args=["f"])
    from yieldstar_django.runtime.schedules import trigger_schedule

    scheduled = trigger_schedule("admin-filter")
    other = start_workflow("api-test-greet", "plain")
    url = reverse("admin:yieldstar_execution_changelist")
    page = admin_client.get(url, {"schedule": "admin-filter"}).content.decode()
    assert scheduled in page and other not in page
    assert "admin-filter" in admin_client.get(url).content.decode()  # the filter's choice
