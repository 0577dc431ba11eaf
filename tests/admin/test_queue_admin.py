"""The queue admin: depth, running, oldest waiting and rate use per queue; pause and
resume actions (the change permission on executions); a queued execution's position on
its page."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from yieldstar_django.models import Execution, QueueState
from yieldstar_django.runtime.queues import Queue, define_queue, unregister_queue

from ..api import workflows  # noqa: F401  (registers api-test-greet)

pytestmark = pytest.mark.django_db

QUEUES = reverse("admin:yieldstar_queuestate_changelist")


@pytest.fixture
def rated() -> Iterator[Queue]:
    queue = define_queue("admin-rated", concurrency=1, rate=(10, 60))
    yield queue
    unregister_queue(queue.name)


def test_the_list_shows_depth_running_oldest_waiting_and_rate_use(
    admin_client: Client, rated: Queue
) -> None:
    ids = [rated.start("api-test-greet", str(i)) for i in range(3)]
    response = admin_client.get(QUEUES)
    assert response.status_code == 200
    row = next(r for r in response.context["cl"].result_list if r.name == rated.name)
    assert (row.waiting, row.running) == (2, 1)
    text = response.content.decode()
    assert "1 / 10 in 60 s" in text
    page = admin_client.get(
        reverse("admin:yieldstar_execution_change", args=[quote(ids[2])])
    ).content.decode()
    assert "Position in its queue" in page
    assert Execution.objects.get(pk=ids[2]).status == "queued"


def test_pause_and_resume_actions(admin_client: Client, rated: Queue) -> None:
    rated.start("api-test-greet", "first")
    response = admin_client.post(
        QUEUES, {"action": "pause_queues", "_selected_action": [rated.name]}, follow=True
    )
    assert response.status_code == 200
    assert QueueState.objects.get(pk=rated.name).paused
    admin_client.post(QUEUES, {"action": "resume_queues", "_selected_action": [rated.name]})
    assert not QueueState.objects.get(pk=rated.name).paused


def test_pausing_needs_the_change_permission(client: Client, rated: Queue) -> None:
    rated.start("api-test-greet", "first")
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="yieldstar", codename__in=["view_queuestate", "view_execution"]
        )
    )
    client.force_login(user)
    assert client.get(QUEUES).status_code == 200
    client.post(QUEUES, {"action": "pause_queues", "_selected_action": [rated.name]})
    assert not QueueState.objects.get(pk=rated.name).paused
