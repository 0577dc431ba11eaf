"""Starts through a queue over HTTP (``queue``, ``key``, ``priority``), a queued
execution's position, and the queue list, pause and resume endpoints."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from yieldstar_django.models import Execution, QueueState

from . import workflows  # noqa: F401  (registers api-test-greet and api-test-single)

pytestmark = pytest.mark.django_db

START = "/yieldstar/executions/"


def start(client: Client, body: Any) -> Any:
    return client.post(START, json.dumps(body), content_type="application/json")


def test_a_start_through_a_full_queue_is_queued_with_its_position(api: Client) -> None:
    body = {"workflow": "api-test-greet", "args": ["x"], "queue": "api-test-single"}
    first = start(api, body)
    assert first.status_code == 201, first.content
    assert (first.json()["status"], first.json()["queue"]) == ("pending", "api-test-single")
    assert first.json()["position"] is None
    second = start(api, {**body, "key": "k", "priority": 3})
    assert second.status_code == 201, second.content
    assert (second.json()["status"], second.json()["position"]) == ("queued", 1)
    third = start(api, body)
    assert third.json()["position"] == 2
    detail = api.get(f"{START}{third.json()['id']}/")
    assert detail.json()["position"] == 2
    [listed] = [q for q in api.get("/yieldstar/queues/").json() if q["name"] == "api-test-single"]
    assert (listed["waiting"], listed["running"], listed["paused"]) == (2, 1, False)
    assert listed["oldest_waiting"] is not None


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"queue": "nope"}, "unknown_queue"),
        ({"key": "k"}, "invalid"),
        ({"priority": 1}, "invalid"),
        ({"queue": "api-test-single", "priority": "1"}, "invalid"),
        ({"queue": "api-test-single", "priority": 2**40}, "invalid"),
        ({"queue": "api-test-single", "key": "\ud800"}, "invalid"),
    ],
)
def test_bad_queue_starts_are_400_and_store_nothing(
    api: Client, body: dict[str, Any], code: str
) -> None:
    response = start(api, {"workflow": "api-test-greet", "args": ["x"], **body})
    assert response.status_code == 400, response.content
    assert response.json()["code"] == code
    assert not Execution.objects.exists()
    assert not QueueState.objects.exists()


def test_pause_and_resume(api: Client) -> None:
    paused = api.post("/yieldstar/queues/api-test-single/pause/", content_type="application/json")
    assert paused.status_code == 200, paused.content
    assert paused.json()["paused"] is True
    body = {"workflow": "api-test-greet", "args": ["x"], "queue": "api-test-single"}
    queued = start(api, body).json()
    assert queued["status"] == "queued"
    resumed = api.post("/yieldstar/queues/api-test-single/resume/", content_type="application/json")
    assert resumed.json() == {**resumed.json(), "paused": False, "running": 1, "waiting": 0}
    assert Execution.objects.get(pk=queued["id"]).status == "pending"
    assert (
        api.post("/yieldstar/queues/nope/pause/", content_type="application/json").status_code
        == 404
    )


def test_pausing_needs_the_change_permission(client_for: Callable[[str], Client]) -> None:
    viewer = client_for("view")
    assert viewer.get("/yieldstar/queues/").status_code == 200
    assert (
        viewer.post(
            "/yieldstar/queues/api-test-single/pause/", content_type="application/json"
        ).status_code
        == 403
    )
    assert not QueueState.objects.exists()
