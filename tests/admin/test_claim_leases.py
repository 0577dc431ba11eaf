"""The claim lease admin: live leases with holders; "release now" asks first."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from yieldstar_django.connector import get_store_client
from yieldstar_django.core.definition import define_store, unregister_store
from yieldstar_django.models import ClaimLeaseRecord, Execution

LEASES = "/admin/yieldstar/claimleaserecord/"

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def held() -> Any:
    store = define_store(
        "admin-lease-queue",
        None,
        initial=lambda id: {"items": []},
        release=lambda draft, value: draft["items"].append(value),
    )
    Execution.objects.create(
        id="holder-1", workflow_id="picker", input_json='{"args":[],"kwargs":{}}'
    )
    record = ClaimLeaseRecord.objects.create(
        id="holder-1/0",
        execution_id="holder-1",
        step_key="0",
        store_name=store.name,
        store_id="q",
        value_json='"job-7"',
        expires_at=timezone.now() + timedelta(minutes=5),
    )
    yield store, record
    unregister_store(store.name)


def test_lists_live_leases_with_holder(admin_client: Client, held: Any) -> None:
    response = admin_client.get(LEASES)
    assert response.status_code == 200
    body = response.content.decode()
    assert "holder-1" in body and "job-7" in body and "admin-lease-queue/q" in body


def test_release_now_confirms_then_hands_back(admin_client: Client, held: Any) -> None:
    store, record = held
    data = {"action": "release_now", "_selected_action": [record.pk]}
    confirm = admin_client.post(LEASES, data)
    assert confirm.status_code == 200
    assert "Yes, release them" in confirm.content.decode()
    assert ClaimLeaseRecord.objects.get(pk=record.pk).state == "held"
    done = admin_client.post(LEASES, {**data, "post": "yes"})
    assert done.status_code == 302
    assert ClaimLeaseRecord.objects.get(pk=record.pk).state == "released"
    assert get_store_client().get_store(store, "q").state == {"items": ["job-7"]}
