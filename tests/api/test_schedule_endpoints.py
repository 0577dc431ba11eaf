"""The schedule endpoints: list, create (bad input ``400`` and nothing stored), read,
pause, resume, trigger now; and the executions list filtered by schedule."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from yieldstar_django.models import Execution, Schedule
from yieldstar_django.runtime import start_workflow
from yieldstar_django.runtime.schedules import create_schedule

from . import workflows  # noqa: F401  (registers the workflow)

pytestmark = pytest.mark.django_db


def post(client: Client, url: str, body: Any = None) -> Any:
    if body is None:
        return client.post(url, content_type="application/json")
    return client.post(url, json.dumps(body), content_type="application/json")


def test_create_list_and_read_a_schedule(api: Client) -> None:
    response = post(
        api,
        reverse("yieldstar:schedule-list"),
        {
            "name": "nightly",
            "workflow": "api-test-greet",
            "cron": "0 3 * * *",
            "timezone": "Europe/Paris",
            "args": ["night"],
            "catch_up": "skip",
        },
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["name"] == "nightly" and body["cron"] == "0 3 * * *"
    assert body["every"] is None and body["args"] == ["night"] and body["catch_up"] == "skip"
    assert body["next_tick_at"] and not body["paused"] and not body["in_code"]
    assert response["Location"].endswith("/schedules/nightly/")
    listed = api.get(reverse("yieldstar:schedule-list")).json()["results"]
    assert [s["name"] for s in listed] == ["nightly"]
    detail = api.get(reverse("yieldstar:schedule-detail", args=["nightly"])).json()
    assert detail == listed[0]
    assert "schedule=nightly" in detail["executions"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"cron": "0 3 * *"}, "cron"),
        ({"cron": "0 3 * * *", "every": 60}, "cron"),
        ({}, "cron"),
        ({"every": 0}, "every"),
        ({"every": 60, "timezone": "Nowhere/Else"}, "timezone"),
        ({"every": 60, "args": [1, 2, 3]}, "args"),
        ({"every": 60, "workflow": "no-such-workflow"}, "workflow"),
        ({"every": 60, "name": "a/b"}, "name"),
    ],
)
def test_a_bad_schedule_is_400_and_stores_nothing(
    api: Client, body: dict[str, Any], field: str
) -> None:
    full = {"name": "bad", "workflow": "api-test-greet", "args": ["x"], **body}
    response = post(api, reverse("yieldstar:schedule-list"), full)
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid_schedule"
    assert response.json()["detail"].startswith(f"{field}:")
    assert not Schedule.objects.exists()


def test_a_taken_name_is_400(api: Client) -> None:
    create_schedule("taken", "api-test-greet", every=60, args=["a"])
    body = {"name": "taken", "workflow": "api-test-greet", "every": 120, "args": ["b"]}
    response = post(api, reverse("yieldstar:schedule-list"), body)
    assert response.status_code == 400 and response.json()["code"] == "invalid_schedule"
    assert Schedule.objects.get(name="taken").every_seconds == 60


def test_create_needs_json(api: Client) -> None:
    response = api.post(
        reverse("yieldstar:schedule-list"),
        "name=x",
        content_type="application/x-www-form-urlencoded",
    )
    assert response.status_code == 415
    assert not Schedule.objects.exists()


def test_pause_resume_and_trigger(api: Client) -> None:
    create_schedule("hourly", "api-test-greet", every=3600, args=["h"])
    paused = post(api, reverse("yieldstar:schedule-pause", args=["hourly"]))
    assert paused.status_code == 200 and paused.json()["paused"] is True
    assert Schedule.objects.get(name="hourly").paused
    resumed = post(api, reverse("yieldstar:schedule-resume", args=["hourly"]))
    assert resumed.status_code == 200 and resumed.json()["paused"] is False
    triggered = post(api, reverse("yieldstar:schedule-trigger", args=["hourly"]))
    assert triggered.status_code == 201
    execution_id = triggered.json()["id"]
    assert execution_id.startswith("schedule:hourly:now:")
    execution = Execution.objects.get(pk=execution_id)
    assert execution.schedule == "hourly" and execution.input["args"] == ["h"]


@pytest.mark.parametrize("action", ["schedule-pause", "schedule-resume", "schedule-trigger"])
def test_unknown_schedules_are_404(api: Client, action: str) -> None:
    response = post(api, reverse(f"yieldstar:{action}", args=["missing"]))
    assert response.status_code == 404
    assert api.get(reverse("yieldstar:schedule-detail", args=["missing"])).status_code == 404


def test_the_executions_list_filters_by_schedule(
    api: Client, client_for: Callable[[str], Client]
) -> None:
    create_schedule("every-minute", "api-test-greet", every=60, args=["m"])
    start_workflow("api-test-greet", "plain")
    from yieldstar_django.runtime.schedules import trigger_schedule

    scheduled = {trigger_schedule("every-minute") for _ in range(2)}
    url = reverse("yieldstar:execution-list")
    listed = api.get(url, {"schedule": "every-minute"}).json()["results"]
    assert {e["id"] for e in listed} == scheduled
    assert api.get(url, {"schedule": "other"}).json()["results"] == []
    assert len(api.get(url).json()["results"]) == 3
