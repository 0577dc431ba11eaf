"""Retry and fork in the execution admin: the bulk retry asks first and reports what
became of each execution; the fork page of an execution picks the step; both need their
own permission and the workflow's hook."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from yieldstar_django.models import Execution, ExecutionStep, WakeIntent
from yieldstar_django.runtime.registry import get_workflow

from .conftest import confirm_fields
from .test_runtime import EXECUTIONS, execution_url, make_execution

pytestmark = pytest.mark.django_db


def fork_url(execution_id: str) -> str:
    return reverse("admin:yieldstar_execution_fork", args=[quote(execution_id)])


def failed_execution(execution_id: str) -> Execution:
    """An execution that failed at its third step (two recorded before it)."""
    execution = make_execution(execution_id, steps=2, status="failed", error_json='{"x":1}')
    ExecutionStep.objects.create(
        execution=execution,
        step_key="2",
        position=2,
        kind="run",
        status="failed",
        error_json='{"type":"builtins:RuntimeError","message":"boom"}',
        fingerprint="tests.fn",
    )
    return execution


@pytest.fixture
def repairer(db: None) -> Callable[[list[str]], Client]:
    """``repairer(codenames)``: a staff client with view_execution and ``codenames``."""

    def make(codenames: list[str]) -> Client:
        user = User.objects.create_user("repairer", password="pw", is_staff=True)
        user.user_permissions.set(
            Permission.objects.filter(codename__in=["view_execution", *codenames])
        )
        client = Client()
        client.force_login(user)
        return client

    return make


@pytest.fixture
def hook_refuses() -> Iterator[set[str]]:
    """The actions the permission hook of ``api-test-greet`` refuses, for the test."""
    refused: set[str] = set()
    wf = get_workflow("api-test-greet")
    wf.permission = lambda request, action, target: action not in refused
    yield refused
    wf.permission = None


def test_bulk_retry_asks_first_then_reports_each_outcome(admin_client: Client) -> None:
    failed_execution("broken")
    make_execution("stopped", status="cancelled")
    make_execution("fine", status="completed")
    make_execution("busy", status="running")
    selected = ["broken", "stopped", "fine", "busy"]
    confirm = admin_client.post(
        EXECUTIONS, {"action": "retry_executions", "_selected_action": selected}
    )
    assert confirm.status_code == 200
    body = confirm.content.decode()
    assert "Yes, retry them" in body
    assert "broken" in body and "stopped" in body and "2 failed or cancelled executions" in body
    assert Execution.objects.get(pk="broken").status == "failed"
    fields = confirm_fields(body)
    assert fields["post"] == ["yes"] and fields["_selected_action"] == selected
    response = admin_client.post(EXECUTIONS, fields, follow=True)
    page = response.content.decode()
    assert "Retried 2 execution(s): " in page
    assert "Skipped 2 execution(s) neither failed nor cancelled: " in page
    assert "fine (completed)" in page and "busy (running)" in page
    statuses = dict(Execution.objects.values_list("id", "status"))
    assert statuses == {
        "broken": "pending",
        "stopped": "pending",
        "fine": "completed",
        "busy": "running",
    }
    assert not ExecutionStep.objects.filter(execution_id="broken", step_key="2").exists()
    assert ExecutionStep.objects.filter(execution_id="broken").count() == 2
    retries = WakeIntent.objects.filter(reason="retry", delivered_at__isnull=True)
    assert sorted(retries.values_list("execution_id", flat=True)) == ["broken", "stopped"]


def test_retry_needs_the_retry_permission(repairer: Callable[[list[str]], Client]) -> None:
    failed_execution("broken")
    client = repairer(["change_execution"])
    assert "retry_executions" not in client.get(EXECUTIONS).content.decode()
    assert "Retry execution" not in client.get(execution_url("broken")).content.decode()
    data = {"action": "retry_executions", "_selected_action": ["broken"], "post": "yes"}
    client.post(EXECUTIONS, data)
    assert Execution.objects.get(pk="broken").status == "failed"


def test_the_hook_refusing_retry_retries_none(admin_client: Client, hook_refuses: set[str]) -> None:
    failed_execution("broken")
    hook_refuses.add("retry")
    assert "Retry execution" not in admin_client.get(execution_url("broken")).content.decode()
    data = {"action": "retry_executions", "_selected_action": ["broken"], "post": "yes"}
    response = admin_client.post(EXECUTIONS, data, follow=True)
    assert "You may not retry 1 of the selected executions" in response.content.decode()
    assert Execution.objects.get(pk="broken").status == "failed"


def test_the_retry_button_on_the_page_asks_first(admin_client: Client) -> None:
    failed_execution("broken")
    page = admin_client.get(execution_url("broken")).content.decode()
    assert 'value="retry_executions"' in page
    data = {"action": "retry_executions", "_selected_action": ["broken"], "index": "0"}
    confirm = admin_client.post(EXECUTIONS, data)
    assert "Yes, retry them" in confirm.content.decode()
    admin_client.post(EXECUTIONS, confirm_fields(confirm.content.decode()))
    assert Execution.objects.get(pk="broken").status == "pending"
    page = admin_client.get(execution_url("broken")).content.decode()
    assert 'value="retry_executions"' not in page  # pending: nothing to retry


def test_fork_page_forks_at_the_step_picked(admin_client: Client) -> None:
    failed_execution("broken")
    page = admin_client.get(execution_url("broken")).content.decode()
    assert fork_url("broken") in page
    form = admin_client.get(fork_url("broken"))
    assert form.status_code == 200
    html = form.content.decode()
    assert 'name="from_step"' in html and 'max="3"' in html and "of 3 recorded steps" in html
    response = admin_client.post(
        fork_url("broken"), {"from_step": "2", "execution_id": "the-fork"}, follow=True
    )
    assert response.redirect_chain[-1][0] == execution_url("the-fork")
    assert "Forked broken at step 2 as the-fork." in response.content.decode()
    fork = Execution.objects.get(pk="the-fork")
    assert (fork.forked_from, fork.fork_step, fork.status) == ("broken", 2, "pending")
    assert list(
        ExecutionStep.objects.filter(execution_id="the-fork").values_list("step_key", flat=True)
    ) == ["0", "1"]
    assert WakeIntent.objects.filter(execution_id="the-fork", reason="fork").count() == 1
    page = response.content.decode()
    assert "Forked from" in page and f'href="{execution_url("broken")}"' in page
    assert Execution.objects.get(pk="broken").status == "failed"


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"from_step": "4"}, "from 0 to 3"),
        ({"from_step": "-1"}, "whole number"),
        ({"from_step": "x"}, "whole number"),
        ({"from_step": "²"}, "whole number"),
        ({"from_step": "0", "execution_id": "admin:7"}, "reserved"),
        ({"from_step": "0", "execution_id": "nul\x00"}, "not valid"),
        ({"from_step": "0", "execution_id": "broken"}, "is not this fork"),
    ],
)
def test_fork_page_shows_what_is_wrong_and_creates_nothing(
    admin_client: Client, data: dict[str, str], error: str
) -> None:
    failed_execution("broken")
    response = admin_client.post(fork_url("broken"), data)
    assert response.status_code == 200
    assert error in response.content.decode()
    assert Execution.objects.count() == 1


def test_fork_needs_the_fork_permission_and_the_hook(
    repairer: Callable[[list[str]], Client], hook_refuses: set[str]
) -> None:
    failed_execution("broken")
    client = repairer(["fork_execution"])
    assert fork_url("broken") in client.get(execution_url("broken")).content.decode()
    hook_refuses.add("fork")
    assert fork_url("broken") not in client.get(execution_url("broken")).content.decode()
    assert client.post(fork_url("broken"), {"from_step": "0"}).status_code == 403
    hook_refuses.add("view")
    assert client.get(fork_url("broken")).status_code == 404
    assert client.get(fork_url("no-such")).status_code == 404
    User.objects.filter(username="repairer").get().user_permissions.remove(
        Permission.objects.get(codename="fork_execution")
    )
    hook_refuses.clear()
    assert client.post(fork_url("broken"), {"from_step": "0"}).status_code == 403
    assert Execution.objects.count() == 1
