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


def test_holder_link_opens_the_execution(admin_client: Client) -> None:
    """The holder's link quotes the execution id as the admin does (an id holding ``_3A``
    or ``/`` opens its own page, not another's or none)."""
    from django.contrib.admin.utils import quote
    from django.urls import reverse

    for execution_id in ["job_3A1", "tenant/7"]:
        Execution.objects.create(
            id=execution_id, workflow_id="picker", input_json='{"args":[],"kwargs":{}}'
        )
        ClaimLeaseRecord.objects.create(
            id=f"{execution_id}/0",
            execution_id=execution_id,
            step_key="0",
            store_name="admin-lease-queue",
            store_id="q",
            value_json='"v"',
            expires_at=timezone.now() + timedelta(minutes=5),
        )
    body = admin_client.get(LEASES).content.decode()
    for execution_id in ["job_3A1", "tenant/7"]:
        link = reverse("admin:yieldstar_execution_change", args=[quote(execution_id)])
        assert f'href="{link}"' in body, execution_id
        assert admin_client.get(link).status_code == 200
