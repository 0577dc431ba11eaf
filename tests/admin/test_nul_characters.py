"""Bad input to the admin (a NUL character, which no stored key or value can hold, in a
list's query string, an object id or an action's selection) is refused like other
lookups the admin cannot apply, never a 500 (PostgreSQL refuses NUL in text)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from yieldstar_django.core.definition import StoreDefinition
from yieldstar_django.core.store import StoreClient
from yieldstar_django.models import ClaimLeaseRecord, Execution, WakeIntent
from yieldstar_django.runtime import start_workflow

from ..api import workflows  # noqa: F401  (registers api-test-greet)

pytestmark = pytest.mark.django_db

ADMIN = "/admin/yieldstar/"


@pytest.fixture
def rows(counters: StoreDefinition, store_client: StoreClient) -> None:
    """A row of each admin's model."""
    store_client.get_store(counters, "a")
    start_workflow("api-test-greet", "x", execution_id="e-1")
    ClaimLeaseRecord.objects.create(
        id="e-1/0",
        execution_id="e-1",
        step_key="0",
        store_name=counters.name,
        store_id="a",
        value_json='"v"',
        expires_at=timezone.now() + timedelta(minutes=5),
    )


@pytest.mark.parametrize(
    "path",
    [
        # the admins' own filters, and Django's on a model field
        "storeinstance/?name=%00",
        "execution/?status=%00",
        "claimleaserecord/?state=%00",
        # a lookup on a field of the model, which the admin accepts from the query string
        "storeinstance/?store_id=%00",
        "execution/?id__gt=%00",
        "wakeintent/?execution_id=%00",
        "idempotencykey/?principal=%00",
        # object pages of models with a text primary key
        "execution/%00/change/",
        "execution/%00/history/",
        "claimleaserecord/%00/change/",
        "claimleaserecord/%00/history/",
    ],
)
def test_nul_in_a_request_is_not_a_500(admin_client: Client, rows: None, path: str) -> None:
    response = admin_client.get(ADMIN + path)
    assert response.status_code in (200, 302), response.status_code


@pytest.mark.parametrize(
    ("model", "action"),
    [
        ("execution", "cancel_executions"),
        ("execution", "resume_executions"),
        ("claimleaserecord", "release_now"),
    ],
)
def test_nul_in_an_action_selection_runs_nothing(
    admin_client: Client, rows: None, model: str, action: str
) -> None:
    intents = WakeIntent.objects.count()
    data: dict[str, Any] = {
        "action": action,
        "index": "0",
        "_selected_action": ["\x00"],
        "post": "yes",
    }
    response = admin_client.post(f"{ADMIN}{model}/", data)
    assert response.status_code in (200, 302), response.status_code
    assert Execution.objects.get(pk="e-1").status != "cancelled"
    assert ClaimLeaseRecord.objects.get(pk="e-1/0").state == "held"
    assert WakeIntent.objects.count() == intents
