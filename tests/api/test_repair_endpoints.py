"""``POST executions/<id>/retry/`` and ``POST executions/<id>/fork/``: what they do, their
permissions (the model permission, then the workflow's hook with ``"retry"`` or
``"fork"``), JSON only, typed errors, and answers that show no more than the user may
view."""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from yieldstar_django.api.executions import ID_TAKEN
from yieldstar_django.models import Execution, ExecutionStep, WakeIntent
from yieldstar_django.runtime import Step, cancel_execution, start_workflow, workflow
from yieldstar_django.runtime.executions import run_execution
from yieldstar_django.runtime.registry import unregister_workflow

from . import workflows  # noqa: F401  (registers api-test-greet)

pytestmark = pytest.mark.django_db

#: The actions the hook of ``api-test-repair`` refuses (set by a test).
REFUSED: set[str] = set()


def hook(request: Any, action: str, target: Any) -> bool:
    return action not in REFUSED


@pytest.fixture
def repaired() -> Iterator[str]:
    """A workflow with a permission hook: a ``run`` step that fails, then a sleep."""

    def fail() -> None:
        raise RuntimeError("boom")

    def fn(step: Step, n: int) -> Generator[Any, Any, None]:
        yield from step.run(lambda: n, key="first")
        yield from step.run(fail, key="second")

    REFUSED.clear()
    workflow("api-test-repair", permission=hook)(fn)
    yield "api-test-repair"
    REFUSED.clear()
    unregister_workflow("api-test-repair")


def failed(name: str) -> str:
    execution_id = start_workflow(name, 7)
    run_execution(execution_id)
    assert Execution.objects.get(pk=execution_id).status == "failed"
    return execution_id


def retry_url(execution_id: str) -> str:
    return reverse("yieldstar:execution-retry", args=[execution_id])


def fork_url(execution_id: str) -> str:
    return reverse("yieldstar:execution-fork", args=[execution_id])


def post(client: Client, url: str, body: Any = None) -> Any:
    if body is None:
        return client.post(url, content_type="application/json")
    return client.post(url, json.dumps(body), content_type="application/json")


def test_retry(repaired: str, client_for: Callable[[str], Client]) -> None:
    execution_id = failed(repaired)
    response = post(client_for("repair"), retry_url(execution_id))
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["id"], body["status"], body["error"]) == (execution_id, "pending", None)
    assert (body["retries"], body["forked_from"], body["fork_step"]) == (1, None, None)
    assert [s["key"] for s in body["steps"]] == ["first"]
    assert WakeIntent.objects.filter(execution_id=execution_id, reason="retry").exists()


def test_retry_of_a_running_or_missing_execution(
    repaired: str, client_for: Callable[[str], Client]
) -> None:
    api = client_for("repair")
    execution_id = start_workflow("api-test-greet", "x")
    response = post(api, retry_url(execution_id))
    assert response.status_code == 409
    assert response.json()["code"] == "execution_conflict"
    assert "pending" in response.json()["detail"]
    assert post(api, retry_url("no-such-execution")).status_code == 404
    cancel_execution(execution_id)
    assert post(api, retry_url(execution_id)).status_code == 200
    assert post(api, retry_url(execution_id)).status_code == 409  # retried already


def test_retry_needs_its_permission_and_the_hook(
    repaired: str, client_for: Callable[[str], Client]
) -> None:
    execution_id = failed(repaired)
    assert post(client_for("change"), retry_url(execution_id)).status_code == 403
    REFUSED.add("retry")
    response = post(client_for("repair"), retry_url(execution_id))
    assert response.status_code == 403
    assert response.json()["detail"] == "You may not retry this execution."
    REFUSED.add("view")  # may neither view nor retry it: as if there were none
    assert post(client_for("repair"), retry_url(execution_id)).status_code == 404
    execution = Execution.objects.get(pk=execution_id)
    assert (execution.status, execution.retries) == ("failed", 0)


def test_answers_show_no_more_than_the_user_may_view(repaired: str, django_user_model: Any) -> None:
    """A user who may retry and fork but not view executions gets the id and status of a
    retried one and the summary of a fork: no input, error or steps."""
    user: User = django_user_model.objects.create_user("blind", password="pw")
    user.user_permissions.set(
        Permission.objects.filter(codename__in=["retry_execution", "fork_execution"])
    )
    client = Client()
    client.force_login(user)
    execution_id = failed(repaired)
    response = post(client, retry_url(execution_id))
    assert response.status_code == 200
    assert response.json() == {"id": execution_id, "status": "pending"}
    response = post(client, fork_url(execution_id), {"from_step": 1})
    assert response.status_code == 201
    assert set(response.json()) == {
        "id",
        "workflow",
        "status",
        "created_at",
        "updated_at",
        "finished_at",
        "url",
    }


def test_fork(repaired: str, client_for: Callable[[str], Client]) -> None:
    execution_id = failed(repaired)
    api = client_for("repair")
    response = post(api, fork_url(execution_id), {"from_step": 1, "execution_id": "forked"})
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["id"], body["status"], body["input"]) == (
        "forked",
        "pending",
        {"args": [7], "kwargs": {}},
    )
    assert [s["key"] for s in body["steps"]] == ["first"]
    assert (body["retries"], body["forked_from"], body["fork_step"]) == (0, execution_id, 1)
    assert response["Location"].endswith(reverse("yieldstar:execution-detail", args=["forked"]))
    fork = Execution.objects.get(pk="forked")
    assert (fork.forked_from, fork.fork_step) == (execution_id, 1)
    again = post(api, fork_url(execution_id), {"from_step": 1, "execution_id": "forked"})
    assert again.status_code == 200
    other = post(api, fork_url(execution_id), {"from_step": 0, "execution_id": "forked"})
    assert other.status_code == 409
    assert other.json()["code"] == "execution_conflict"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"from_step": 3}, "invalid_fork_point"),
        ({"from_step": -1}, "invalid"),
        ({"from_step": "1"}, "invalid"),
        ({"from_step": True}, "invalid"),
        ({"from_step": 1.5}, "invalid"),
        ({}, "invalid"),
        ([1], "invalid"),
        ({"from_step": 0, "execution_id": "http:7:x"}, "invalid"),
        ({"from_step": 0, "execution_id": "a/b"}, "invalid"),
    ],
)
def test_bad_forks_are_400_and_create_nothing(
    repaired: str, client_for: Callable[[str], Client], body: Any, code: str
) -> None:
    execution_id = failed(repaired)
    before = Execution.objects.count()
    response = post(client_for("repair"), fork_url(execution_id), body)
    assert response.status_code == 400, response.content
    assert response.json()["code"] == code
    assert Execution.objects.count() == before


def test_fork_of_an_id_taken_by_an_execution_the_user_may_not_view(
    repaired: str, client_for: Callable[[str], Client]
) -> None:
    execution_id = failed(repaired)
    hidden = start_workflow(repaired, 1, execution_id="hidden")
    api = client_for("repair")
    response = post(api, fork_url(execution_id), {"from_step": 0, "execution_id": hidden})
    assert response.status_code == 409
    assert "is not this fork" in response.json()["detail"]
    REFUSED.add("view")  # the hook hides every execution of the workflow: the id is taken
    response = post(api, fork_url(execution_id), {"from_step": 0, "execution_id": hidden})
    assert response.status_code == 409
    assert response.json()["detail"] == ID_TAKEN


def test_fork_needs_its_permission_and_the_hook(
    repaired: str, client_for: Callable[[str], Client]
) -> None:
    execution_id = failed(repaired)
    before = Execution.objects.count()
    assert post(client_for("change"), fork_url(execution_id), {"from_step": 0}).status_code == 403
    REFUSED.add("fork")
    response = post(client_for("repair"), fork_url(execution_id), {"from_step": 0})
    assert response.status_code == 403
    assert response.json()["detail"] == "You may not fork this execution."
    assert Execution.objects.count() == before


@pytest.mark.parametrize("name", ["execution-retry", "execution-fork"])
@pytest.mark.parametrize(
    "content_type", ["application/x-www-form-urlencoded", "text/plain", "multipart/form-data"]
)
def test_writes_are_json_only(
    repaired: str, client_for: Callable[[str], Client], name: str, content_type: str
) -> None:
    execution_id = failed(repaired)
    url = reverse(f"yieldstar:{name}", args=[execution_id])
    response = client_for("repair").post(url, "from_step=0", content_type=content_type)
    assert response.status_code == 415, response.content
    execution = Execution.objects.get(pk=execution_id)
    assert (execution.status, Execution.objects.count()) == ("failed", 1)
    assert ExecutionStep.objects.filter(execution_id=execution_id).count() == 2
