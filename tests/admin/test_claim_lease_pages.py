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

from .conftest import confirm_fields

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


def lease_on(store_name: str, store_id: str, execution_id: str, value_json: str) -> Any:
    """A held lease of ``execution_id`` on ``store_name/store_id`` (its store created)."""
    Execution.objects.create(
        id=execution_id, workflow_id="picker", input_json='{"args":[],"kwargs":{}}'
    )
    return ClaimLeaseRecord.objects.create(
        id=f"{execution_id}/0",
        execution_id=execution_id,
        step_key="0",
        store_name=store_name,
        store_id=store_id,
        value_json=value_json,
        expires_at=timezone.now() + timedelta(minutes=5),
    )


@pytest.fixture
def hooked() -> Any:
    """Three queues behind permission hooks: one hidden, one whose store ``secret`` is
    hidden, one the user may view but not change."""

    def define(name: str, permission: Any) -> Any:
        return define_store(
            name,
            None,
            initial=lambda id: {"items": []},
            release=lambda draft, value: draft["items"].append(value),
            permission=permission,
        )

    stores = {
        "hidden": define("admin-lease-hidden", lambda request, action, id: False),
        "per-id": define("admin-lease-per-id", lambda request, action, id: id != "secret"),
        "locked": define("admin-lease-locked", lambda request, action, id: action == "view"),
    }
    for store in stores.values():
        get_store_client().get_store(store, "q")
    yield stores
    for store in stores.values():
        unregister_store(store.name)


def lease_url(record: Any, page: str = "change") -> str:
    from django.contrib.admin.utils import quote
    from django.urls import reverse

    return reverse(f"admin:yieldstar_claimleaserecord_{page}", args=[quote(record.pk)])


def test_hook_hides_leases_of_stores_the_user_may_not_view(
    admin_client: Client, hooked: Any
) -> None:
    """A definition's ``permission`` hook applies as in the store admin: the leases of a
    store it hides are not listed and their page is not found; a store id it hides has
    its lease's value kept out of the list, and its page refused."""
    hidden = lease_on("admin-lease-hidden", "q", "holder-hidden", '"hidden-value"')
    secret = lease_on("admin-lease-per-id", "secret", "holder-secret", '"secret-value"')
    shown = lease_on("admin-lease-per-id", "open", "holder-open", '"open-value"')
    body = admin_client.get(LEASES).content.decode()
    assert "admin-lease-hidden" not in body and "hidden-value" not in body
    assert "holder-hidden" not in body
    assert "secret-value" not in body
    assert "admin-lease-per-id/open" in body and "open-value" in body
    assert admin_client.get(LEASES + "?state=all").content.decode().count("hidden-value") == 0
    assert admin_client.get(lease_url(hidden)).status_code == 302  # not found: redirected
    response = admin_client.get(lease_url(secret))
    assert response.status_code == 403
    assert b"secret-value" not in response.content
    assert admin_client.get(lease_url(secret, "history")).status_code == 403
    assert admin_client.get(lease_url(shown)).status_code == 200


@pytest.mark.parametrize("confirmed", [False, True])
def test_release_now_refuses_leases_on_stores_the_hook_does_not_let_change(
    admin_client: Client, held: Any, hooked: Any, confirmed: bool
) -> None:
    """*Release now* writes the value back to the lease's store: a selection holding a
    lease on a store whose hook refuses ``change`` is refused, with a message, and
    nothing is released (not even the leases the user may release)."""
    _, allowed = held
    locked = lease_on("admin-lease-locked", "q", "holder-locked", '"locked-value"')
    data = {"action": "release_now", "_selected_action": [allowed.pk, locked.pk]}
    if confirmed:  # a hand-built confirmation
        data["post"] = "yes"
    response = admin_client.post(LEASES, data, follow=True)
    assert response.status_code == 200
    body = response.content.decode()
    assert "Yes, release them" not in body
    assert "You may not change the store of 1 selected lease" in body
    assert "admin-lease-locked/q" in body
    assert "nothing was released" in body
    assert set(ClaimLeaseRecord.objects.values_list("state", flat=True)) == {"held"}
    client = get_store_client()
    assert client.get_store(hooked["locked"], "q").state == {"items": []}
    assert client.get_store(held[0], "q").state == {"items": []}


def test_release_now_refuses_a_store_id_the_hook_does_not_let_change(
    admin_client: Client, hooked: Any
) -> None:
    """The hook is asked about the lease's own store id: a lease whose store it hides is
    not among the list's rows, so a post naming it releases nothing."""
    secret = lease_on("admin-lease-per-id", "secret", "holder-secret", '"secret-value"')
    data = {"action": "release_now", "_selected_action": [secret.pk], "post": "yes"}
    response = admin_client.post(LEASES, data, follow=True)
    assert "holder-secret" not in response.content.decode()
    assert ClaimLeaseRecord.objects.get(pk=secret.pk).state == "held"
    assert get_store_client().get_store(hooked["per-id"], "secret").state == {"items": []}


def test_release_now_across_all_pages_releases_the_whole_selection(
    admin_client: Client, held: Any
) -> None:
    """Ticking "Select all N items" (``select_across``) selects the list's whole queryset,
    not only the rows ticked on the page: the confirmation page carries that selection,
    and confirming it (posting its form back as a browser does) releases every held lease
    the list selects, and no other."""
    store, first = held
    others = [lease_on(store.name, "q", f"holder-{n}", f'"job-{n}"') for n in range(2, 5)]
    ended = lease_on(store.name, "q", "holder-ended", '"ended"')
    ClaimLeaseRecord.objects.filter(pk=ended.pk).update(state="completed")
    # The browser posts the ids ticked on the page, and select_across.
    data = {"action": "release_now", "select_across": "1", "index": "0"}
    confirm = admin_client.post(LEASES, {**data, "_selected_action": [first.pk]})
    assert confirm.status_code == 200
    body = confirm.content.decode()
    assert "Yes, release them" in body
    for record in [first, *others]:
        assert record.execution_id in body
    assert "holder-ended" not in body
    fields = confirm_fields(body)
    assert fields["post"] == ["yes"] and fields["action"] == ["release_now"]
    assert set(ClaimLeaseRecord.objects.values_list("state", flat=True)) == {"held", "completed"}
    done = admin_client.post(LEASES, fields, follow=True)
    assert done.status_code == 200
    assert "Released 4 lease(s)" in done.content.decode()
    states = dict(ClaimLeaseRecord.objects.values_list("pk", "state"))
    assert states == {
        **{record.pk: "released" for record in [first, *others]},
        ended.pk: "completed",
    }
    items = get_store_client().get_store(store, "q").state["items"]
    assert sorted(items) == ["job-2", "job-3", "job-4", "job-7"]


def test_release_now_across_all_pages_checks_the_hook_of_every_lease(
    admin_client: Client, held: Any, hooked: Any
) -> None:
    """A selection across pages is checked against the hook lease by lease, on the
    confirmation page and on confirming: one lease on a store the user may not change
    refuses the whole selection, and nothing is released."""
    _, allowed = held
    lease_on("admin-lease-locked", "q", "holder-locked", '"locked-value"')
    data = {"action": "release_now", "select_across": "1", "_selected_action": [allowed.pk]}
    for confirmed in (False, True):
        response = admin_client.post(
            LEASES, {**data, "post": "yes"} if confirmed else data, follow=True
        )
        body = response.content.decode()
        assert "Yes, release them" not in body
        assert "You may not change the store of 1 selected lease" in body
        assert set(ClaimLeaseRecord.objects.values_list("state", flat=True)) == {"held"}


def requeue(draft: Any, value: Any) -> None:
    draft["dead"].remove(value)
    draft["items"].append(value)


@pytest.fixture
def dead_lettered() -> Any:
    """A dead-lettered lease of ``job-9`` and its store, where ``dead_letter`` put it."""
    store = define_store(
        "admin-dead-letters",
        None,
        initial=lambda id: {"items": [], "dead": []},
        release=lambda draft, value: draft["items"].append(value),
        max_deliveries=3,
        dead_letter=lambda draft, value: draft["dead"].append(value),
        requeue=requeue,
    )
    client = get_store_client()
    client.update_store(store, "q", updater=lambda d: d["dead"].append("job-9"))
    record = lease_on(store.name, "q", "holder-9", '"job-9"')
    ClaimLeaseRecord.objects.filter(pk=record.pk).update(
        state="dead_lettered",
        delivery=3,
        instance_id=client.get_store(store, "q").instance_id,
        ended_at=timezone.now(),
    )
    yield store, record
    unregister_store(store.name)


def test_the_dead_lettered_filter_lists_dead_letters(
    admin_client: Client, dead_lettered: Any
) -> None:
    assert "job-9" not in admin_client.get(LEASES).content.decode(), "held ones by default"
    body = admin_client.get(LEASES, {"state": "dead_lettered"}).content.decode()
    assert "job-9" in body and "admin-dead-letters/q" in body and "dead-lettered" in body


def test_requeue_confirms_then_takes_the_dead_letter_back_once(
    admin_client: Client, dead_lettered: Any
) -> None:
    store, record = dead_lettered
    url = f"{LEASES}?state=dead_lettered"
    data = {"action": "requeue", "_selected_action": [record.pk]}
    confirm = admin_client.post(url, data)
    assert confirm.status_code == 200
    page = confirm.content.decode()
    assert "Yes, requeue them" in page and "after 3 deliveries" in page
    assert ClaimLeaseRecord.objects.get(pk=record.pk).state == "dead_lettered"
    client = get_store_client()
    version = client.get_store(store, "q").version
    done = admin_client.post(url, {**data, "post": "yes"})
    assert done.status_code == 302
    assert ClaimLeaseRecord.objects.get(pk=record.pk).state == "requeued"
    after = client.get_store(store, "q")
    assert after.state == {"items": ["job-9"], "dead": []}
    assert after.version == version + 1
    again = admin_client.post(url, {**data, "post": "yes"})  # a second requeue: nothing
    assert again.status_code == 302
    assert client.get_store(store, "q").version == version + 1
