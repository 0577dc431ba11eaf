"""The permission hooks in the admin: the store lists and their search, the idempotency
keys of store writes, and executions (a workflow's hook)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db.models import Q
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from yieldstar_django.core.definition import StoreDefinition, define_store, unregister_store
from yieldstar_django.core.store import StoreClient
from yieldstar_django.models import ClaimLeaseRecord, Execution, IdempotencyKey, WakeIntent
from yieldstar_django.runtime import start_workflow, workflow
from yieldstar_django.runtime.registry import unregister_workflow

pytestmark = pytest.mark.django_db

STAFF = [
    "view_storeinstance",
    "view_execution",
    "change_execution",
    "view_idempotencykey",
    "view_claimleaserecord",
    "change_claimleaserecord",
    "view_wakeintent",
    "change_wakeintent",
]


def own_only(request: Any, action: str, store_id: str | None) -> bool:
    return store_id is None or store_id == f"user-{request.user.pk}"


def own_only_q(request: Any, action: str, store_id: str | None) -> Any:
    own = f"user-{request.user.pk}"
    return Q(id=own) if store_id is None else store_id == own


@pytest.fixture
def staff_user(db: None) -> User:
    user = User.objects.create_user("shopper", password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="yieldstar", codename__in=STAFF)
    )
    return user


@pytest.fixture
def client(staff_user: User) -> Client:
    made = Client()
    made.force_login(staff_user)
    return made


@pytest.fixture(params=[own_only, own_only_q], ids=["per-id", "q"])
def carts(request: Any) -> Iterator[StoreDefinition]:
    definition = define_store("admin-carts", None, initial=lambda id: {}, permission=request.param)
    yield definition
    unregister_store(definition.name)


def test_the_store_list_and_its_search_show_only_allowed_ids(
    client: Client, staff_user: User, carts: StoreDefinition, store_client: StoreClient
) -> None:
    """The admin's store list, and its search, showed every user's cart id."""
    own = f"user-{staff_user.pk}"
    for store_id in ["user-0", own, "user-secret"]:
        store_client.get_store(carts, store_id)
    url = reverse("admin:yieldstar_storeinstance_changelist")
    assert "(3)" not in client.get(url + "?_facets=1").content.decode()  # no hidden counts
    for query in ["", "?q=user-", "?name=admin-carts"]:
        page = client.get(url + query)
        assert page.status_code == 200
        html = page.content.decode()
        assert own in html
        assert "user-0" not in html and "user-secret" not in html, query


def test_the_idempotency_keys_of_hidden_stores_are_not_shown(
    client: Client, staff_user: User, carts: StoreDefinition
) -> None:
    """The idempotency-key admin showed the target (name and id) of every user's writes."""
    own = f"user-{staff_user.pk}"
    for n, store_id in enumerate(["user-secret", own]):
        IdempotencyKey.objects.create(
            principal=f"http:{n}",
            key=f"k-{n}",
            fingerprint="0" * 64,
            method="PUT",
            target=f"stores/admin-carts/{store_id}",
        )
    hidden = IdempotencyKey.objects.get(key="k-0")
    url = reverse("admin:yieldstar_idempotencykey_changelist")
    for query in ["", "?q=k-0"]:
        html = client.get(url + query).content.decode()
        assert "user-secret" not in html, query
    assert own in client.get(url).content.decode()
    change = reverse("admin:yieldstar_idempotencykey_change", args=[hidden.pk])
    assert client.get(change).status_code in (302, 403)


def test_the_lease_list_hides_leases_of_hidden_stores(
    client: Client, staff_user: User, carts: StoreDefinition
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    for n, store_id in enumerate(["user-secret", f"user-{staff_user.pk}"]):
        Execution.objects.create(id=f"holder-{n}", workflow_id="w", input_json="{}")
        ClaimLeaseRecord.objects.create(
            id=f"holder-{n}/0",
            execution_id=f"holder-{n}",
            step_key="0",
            store_name="admin-carts",
            store_id=store_id,
            value_json='"v"',
            expires_at=timezone.now() + timedelta(minutes=5),
        )
    html = client.get(reverse("admin:yieldstar_claimleaserecord_changelist")).content.decode()
    assert f"user-{staff_user.pk}" in html
    assert "user-secret" not in html


def cart_hook(request: Any, action: str, target: Any) -> bool:
    arguments = target if action == "start" else target.input
    return bool(arguments["args"]) and arguments["args"][0] == f"user-{request.user.pk}"


@pytest.fixture
def cart_workflow() -> Iterator[Any]:
    @workflow("admin-cart-total", permission=cart_hook)
    def cart_total(step: Any, cart: str) -> Any:
        yield from step.sleep(86400)
        return cart

    yield cart_total
    unregister_workflow("admin-cart-total")


def test_the_execution_hook_narrows_the_admin(
    client: Client, staff_user: User, cart_workflow: Any
) -> None:
    """Whoever could read executions in the admin read them all."""
    mine = start_workflow("admin-cart-total", f"user-{staff_user.pk}", execution_id="mine-1")
    start_workflow("admin-cart-total", "user-0", execution_id="theirs-1")
    changelist = reverse("admin:yieldstar_execution_changelist")
    html = client.get(changelist).content.decode()
    assert mine in html and "theirs-1" not in html
    assert "(2)" not in client.get(changelist + "?_facets=1").content.decode()
    assert "theirs-1" not in client.get(changelist + "?q=theirs").content.decode()
    theirs = reverse("admin:yieldstar_execution_change", args=["theirs-1"])
    assert client.get(theirs).status_code in (302, 403)
    assert client.get(reverse("admin:yieldstar_execution_change", args=[mine])).status_code == 200
    # Cancel (select all: the hidden one too) refuses and cancels nothing.
    response = client.post(
        changelist,
        {"action": "cancel_executions", "select_across": "1", "index": "0",
         "_selected_action": [mine], "post": "yes"},
    )  # fmt: skip
    assert response.status_code == 302
    assert set(Execution.objects.values_list("status", flat=True)) != {"cancelled"}
    assert Execution.objects.get(pk="theirs-1").status != "cancelled"


def outbox_intent(execution_id: str, workflow_id: str = "admin-cart-total") -> WakeIntent:
    now = timezone.now()
    return WakeIntent.objects.create(
        execution_id=execution_id,
        workflow_id=workflow_id,
        reason="timer",
        available_at=now,
        created_at=now,
    )


def test_the_outbox_shows_only_intents_of_executions_the_hook_shows(
    client: Client, staff_user: User, cart_workflow: Any, wakes: list[Any]
) -> None:
    """The outbox showed every execution's id and workflow to whoever could read it."""
    start_workflow("admin-cart-total", f"user-{staff_user.pk}", execution_id="mine-1")
    start_workflow("admin-cart-total", "user-0", execution_id="theirs-1")
    mine, theirs = outbox_intent("mine-1"), outbox_intent("theirs-1")
    gone = outbox_intent("pruned-1")  # a hooked workflow's intent whose execution is gone
    unhooked = outbox_intent("plain-1", workflow_id="admin-no-hook")
    changelist = reverse("admin:yieldstar_wakeintent_changelist")
    html = client.get(changelist).content.decode()
    assert "mine-1" in html and "plain-1" in html
    assert "theirs-1" not in html and "pruned-1" not in html
    assert ">theirs-1<" not in client.get(changelist + "?q=theirs-1").content.decode()
    facets = client.get(changelist + "?_facets=1").content.decode()
    assert "pending" in facets and not re.search(r"pending\s*\(\d+\)", facets)
    for intent, status in [(mine, 200), (unhooked, 200), (theirs, 302), (gone, 302)]:
        page = client.get(reverse("admin:yieldstar_wakeintent_change", args=[intent.pk]))
        assert page.status_code == status or (status == 302 and page.status_code == 403)
    # Deliver again, "select all": it selects the intents the list shows, no others.
    wakes.clear()
    client.post(
        changelist,
        {"action": "deliver_again", "select_across": "1", "index": "0",
         "_selected_action": [mine.pk]},
        follow=True,
    )  # fmt: skip
    assert {w.execution_id for w in wakes} <= {"mine-1", "plain-1"}
    assert "mine-1" in {w.execution_id for w in wakes}
    # A hidden intent named in the post is not among the list's rows: not delivered.
    wakes.clear()
    client.post(changelist, {"action": "deliver_again", "_selected_action": [mine.pk, theirs.pk]})
    assert [w.execution_id for w in wakes] == ["mine-1"]


def test_the_outbox_needs_the_execution_view_permission(db: None) -> None:
    """Execution ids are shown only to a user who may view executions."""
    user = User.objects.create_user("outbox", password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="yieldstar", codename="view_wakeintent")
    )
    intent = outbox_intent("someone-1", workflow_id="admin-no-hook")
    browser = Client()
    browser.force_login(user)
    changelist = browser.get(reverse("admin:yieldstar_wakeintent_changelist"))
    assert changelist.status_code == 403
    page = browser.get(reverse("admin:yieldstar_wakeintent_change", args=[intent.pk]))
    assert page.status_code in (302, 403)
    assert "someone-1" not in browser.get(reverse("admin:index")).content.decode()


def result_counts(html: str) -> list[str]:
    """The counts a list page shows: the search's "N results" and the paginator's."""
    return re.findall(r"(\d+) (?:results?|stores?|executions?|idempotency keys?)\b", html)


def test_the_list_counts_only_the_rows_a_per_id_hook_shows(
    client: Client, staff_user: User, store_client: StoreClient
) -> None:
    """With a hook that answers each id (no ``Q``), the count and the search's count
    included the stores it hides."""
    definition = define_store("admin-carts", None, initial=lambda id: {}, permission=own_only)
    try:
        own = f"user-{staff_user.pk}"
        for store_id in ["user-0", own, "user-secret"]:
            store_client.get_store(definition, store_id)
        url = reverse("admin:yieldstar_storeinstance_changelist")
        for query in ["", "?q=user-"]:
            counts = result_counts(client.get(url + query).content.decode())
            assert counts and set(counts) == {"1"}, (query, counts)
    finally:
        unregister_store(definition.name)


def test_the_execution_list_counts_only_what_the_hook_shows(
    client: Client, staff_user: User, cart_workflow: Any
) -> None:
    start_workflow("admin-cart-total", f"user-{staff_user.pk}", execution_id="mine-1")
    for n in range(3):
        start_workflow("admin-cart-total", f"user-x{n}", execution_id=f"theirs-{n}")
    changelist = reverse("admin:yieldstar_execution_changelist")
    for query in ["", "?q=mine-1"]:
        counts = result_counts(client.get(changelist + query).content.decode())
        assert counts and set(counts) == {"1"}, (query, counts)


def test_a_lease_is_shown_only_to_who_may_view_its_holder(
    client: Client, staff_user: User, cart_workflow: Any
) -> None:
    """The lease list named every holder execution (its id is the lease's too), whatever
    the workflow's hook said."""
    from datetime import timedelta

    start_workflow("admin-cart-total", f"user-{staff_user.pk}", execution_id="mine-1")
    start_workflow("admin-cart-total", "user-0", execution_id="theirs-1")
    for n, holder in enumerate(["mine-1", "theirs-1"]):
        ClaimLeaseRecord.objects.create(
            id=f"{holder}/0",
            execution_id=holder,
            step_key="0",
            store_name="admin-open",
            store_id=f"queue-{n}",
            value_json='"v"',
            expires_at=timezone.now() + timedelta(minutes=5),
        )
    changelist = reverse("admin:yieldstar_claimleaserecord_changelist")
    html = client.get(changelist).content.decode()
    assert "mine-1" in html and "theirs-1" not in html and "queue-1" not in html
    assert set(result_counts(html)) <= {"1"}
    theirs = reverse("admin:yieldstar_claimleaserecord_change", args=["theirs-1/0"])
    assert client.get(theirs).status_code in (302, 403)
    # Without the view permission on executions, no lease is listed.
    staff_user.user_permissions.remove(Permission.objects.get(codename="view_execution"))
    plain = Client()
    plain.force_login(User.objects.get(pk=staff_user.pk))
    assert plain.get(changelist).status_code == 403
