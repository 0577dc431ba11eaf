"""Rows whose JSON text does not decode (written by hand, or by another program writing
the tables): the admin pages show the raw text marked "not valid JSON", never a 500, and a
store whose state does not decode is shown read-only."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape

from yieldstar_django.core.definition import StoreDefinition
from yieldstar_django.core.results import StoreStepId
from yieldstar_django.core.store import StoreClient
from yieldstar_django.models import (
    AppliedStep,
    ClaimLeaseRecord,
    Execution,
    ExecutionStep,
    StoreInstance,
    StoreVersion,
    Waiter,
)
from yieldstar_django.runtime import start_workflow

from ..api import workflows  # noqa: F401  (registers api-test-greet)
from .test_store_pages import LIST, add_waiter, page_url

pytestmark = pytest.mark.django_db

#: Texts ``decode_durable`` refuses: cut short, a constant JSON has not, an integer past
#: Python's 4,300 digits, nesting past the recursion limit.
CORRUPT = ['{"count": 1, "ta', "NaN", "9" * 5000, "[" * 100_000 + "]" * 100_000]
IDS = ["truncated", "nan", "huge-int", "deep"]

MARK = "not valid JSON"


@pytest.mark.parametrize("text", CORRUPT, ids=IDS)
def test_an_execution_page_shows_undecodable_columns_raw(admin_client: Client, text: str) -> None:
    start_workflow("api-test-greet", "x", execution_id="corrupt")
    Execution.objects.filter(pk="corrupt").update(
        input_json=text, result_json=text, error_json=text
    )
    execution = Execution.objects.get(pk="corrupt")
    ExecutionStep.objects.create(
        execution=execution, step_key="0", position=0, kind="run", status="completed",
        value_json=text,
    )  # fmt: skip
    ExecutionStep.objects.create(
        execution=execution, step_key="1", position=1, kind="run", status="failed",
        error_json=text,
    )  # fmt: skip
    response = admin_client.get(
        reverse("admin:yieldstar_execution_change", args=[quote("corrupt")])
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert html.count(MARK) >= 5  # input, result, error, a step's value, a step's error
    assert escape(text[:12]) in html
    listed = admin_client.get(reverse("admin:yieldstar_execution_changelist"))
    assert listed.status_code == 200


@pytest.mark.parametrize("text", CORRUPT, ids=IDS)
def test_a_store_page_shows_undecodable_columns_raw_and_refuses_edits(
    admin_client: Client, counters: StoreDefinition, store_client: StoreClient, text: str
) -> None:
    url = page_url(store_client, counters, "corrupt")
    store_client.update_store(
        counters, "corrupt", updater=lambda d: d.update(count=1), step_id=StoreStepId("e", "s")
    )
    add_waiter(store_client, counters, "corrupt", 0)
    rows: dict[str, Any] = {"name": counters.name, "store_id": "corrupt"}
    StoreInstance.objects.filter(**rows).update(state=text)
    versions = StoreVersion.objects.filter(store_name=counters.name, store_id="corrupt")
    versions.update(state=text, changed_paths=text)
    AppliedStep.objects.filter(**{"store_name": counters.name, "store_id": "corrupt"}).update(
        result=text
    )
    Waiter.objects.filter(store__store_id="corrupt").update(read_paths=text)
    page = admin_client.get(url)
    assert page.status_code == 200
    html = page.content.decode()
    # the state, both versions' states and paths, the ledger entry, the waiter's paths
    assert html.count(MARK) >= 6, html.count(MARK)
    assert escape(text[:12]) in html
    assert 'name="state_json"' not in html
    assert 'name="_save"' not in html
    assert "Shown read-only: its state is not valid JSON" in html
    assert admin_client.get(LIST).status_code == 200
    edit = {
        "state_json": '{"count": 7}',
        "expected_instance_id": StoreInstance.objects.get(**rows).instance_id,
        "expected_version": "1",
        "edit_token": "hand-built",
        "_save": "Save",
    }
    refused = admin_client.post(url, edit, follow=True)
    assert refused.status_code == 200
    assert "This store cannot be edited in the admin" in refused.content.decode()
    row = StoreInstance.objects.get(**rows)
    assert (row.version, row.state) == (1, text)


@pytest.mark.parametrize("text", CORRUPT, ids=IDS)
def test_the_claim_lease_list_shows_an_undecodable_value_raw(
    admin_client: Client, counters: StoreDefinition, text: str
) -> None:
    start_workflow("api-test-greet", "x", execution_id="holder")
    ClaimLeaseRecord.objects.create(
        id="holder/0", execution_id="holder", step_key="0", store_name=counters.name,
        store_id="q", value_json=text, expires_at=timezone.now() + timedelta(minutes=5),
    )  # fmt: skip
    response = admin_client.get(reverse("admin:yieldstar_claimleaserecord_changelist"))
    assert response.status_code == 200
    html = response.content.decode()
    assert MARK in html
    assert escape(text[:12]) in html
