"""A real browser (Debian's Chromium driven by Playwright) against ``live_server``: log in
to the admin, open a store, edit it, and see the conflict message when the store changed
behind the page's back.

Screenshots go to ``$YIELDSTAR_SCREENSHOT_DIR`` when set (the docs' images are made with
``YIELDSTAR_SCREENSHOT_DIR=docs/img pytest -m browser``), else to a temporary directory.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from yieldstar_django.core.definition import StoreDefinition, define_store, unregister_store
from yieldstar_django.core.results import StoreStepId, StoreWaiter

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: How long the browser waits for a page or an element, in milliseconds (a wait, not an
#: assertion on speed).
WAIT_MS = 30_000

SCHEMA = {
    "type": "object",
    "properties": {
        "stock": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
        "orders": {"type": "array"},
    },
    "required": ["stock", "orders"],
}


@pytest.fixture
def inventory() -> Iterator[StoreDefinition]:
    definition = define_store("inventory", SCHEMA, initial=lambda id: {"stock": {}, "orders": []})
    yield definition
    unregister_store(definition.name)


@pytest.fixture(autouse=True)
def _no_celery(settings: Any) -> None:
    """Wakes are recorded, not sent to a broker."""
    settings.YIELDSTAR = {**settings.YIELDSTAR, "WAKE_BACKEND": lambda wakes: None}


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    target = os.environ.get("YIELDSTAR_SCREENSHOT_DIR")
    path = Path(target) if target else tmp_path
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def browser_page(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    if shutil.which(CHROMIUM) is None:
        pytest.skip(
            f"needs Chromium at {CHROMIUM} (apt-get install chromium; scripts/test.sh does)"
        )
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the test's own ORM calls are
    # synchronous and safe.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            page = context.new_page()
            page.set_default_timeout(WAIT_MS)
            yield page
        finally:
            browser.close()
            # ORM calls made while Playwright's loop runs use a connection of their own
            # (Django's connections are context-local); close it before the test database
            # is dropped.
            connections.close_all()


def seed(inventory: StoreDefinition) -> Any:
    """A store with some history, a waiter and ledger entries (also for the screenshots)."""
    from yieldstar_django.connector import get_store_client

    client = get_store_client()
    client.get_store(inventory, "warehouse-1")
    client.update_store(
        inventory,
        "warehouse-1",
        updater=lambda d: d["stock"].update(apples=12, pears=4),
        step_id=StoreStepId("restock-7f3a", "0"),
    )
    client.update_store(
        inventory,
        "warehouse-1",
        updater=lambda d: d["orders"].append({"id": "A-17", "apples": 3}),
        step_id=StoreStepId("checkout-91c2", "2"),
    )
    snapshot = client.get_store(inventory, "warehouse-1")
    client.register_waiter(
        StoreWaiter(
            "fulfil",
            "fulfil-5d0e",
            "1",
            "inventory",
            "warehouse-1",
            snapshot.instance_id,
            snapshot.version,
            (("orders",),),
        )
    )
    for n in range(2, 6):
        client.get_store(inventory, f"warehouse-{n}")
    return client


def test_edit_and_conflict(
    live_server: Any,
    django_user_model: Any,
    inventory: StoreDefinition,
    browser_page: Any,
    screenshots: Path,
) -> None:
    from playwright.sync_api import expect

    client = seed(inventory)
    django_user_model.objects.create_superuser("operator", password="correct horse")
    page = browser_page

    # Log in.
    page.goto(f"{live_server.url}/admin/login/?next=/admin/yieldstar/storeinstance/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", "correct horse")
    page.click("input[type=submit]")
    expect(page.locator("#result_list")).to_contain_text("warehouse-1")
    page.screenshot(path=str(screenshots / "admin-store-list.png"), full_page=True)

    # Open the store.
    page.click("text=warehouse-1")
    expect(page.locator("#versions")).to_contain_text("$.orders")
    expect(page.locator("#waiters")).to_contain_text("fulfil-5d0e")
    page.screenshot(path=str(screenshots / "admin-store-page.png"), full_page=True)

    # Edit it.
    editor = page.locator("#id_state_json")
    editor.fill('{"orders": [], "stock": {"apples": 9, "pears": 4}}')
    page.click("input[name=_continue]")
    expect(page.locator(".messagelist")).to_contain_text("changed successfully")
    snapshot = client.get_store(inventory, "warehouse-1")
    assert snapshot.state == {"orders": [], "stock": {"apples": 9, "pears": 4}}
    assert snapshot.version == 3

    # Edit again while someone else changes the store behind the page's back.
    page.locator("#id_state_json").fill('{"orders": [], "stock": {"apples": 0, "pears": 4}}')
    client.update_store(inventory, "warehouse-1", updater=lambda d: d["stock"].update(pears=5))
    page.click("input[name=_continue]")
    expect(page.locator(".errornote, .errorlist").first).to_be_visible()
    expect(page.locator("#storeinstance_form")).to_contain_text(
        "Someone else changed this store while you were editing it"
    )
    expect(page.locator("#storeinstance_form")).to_contain_text(
        "you opened version 3 and it is now at version 4"
    )
    page.screenshot(path=str(screenshots / "admin-conflict.png"), full_page=True)
    after = client.get_store(inventory, "warehouse-1")
    assert after.state == {"orders": [], "stock": {"apples": 9, "pears": 5}}  # nothing blind
    assert after.version == 4


def test_execution_page(
    live_server: Any, admin_user: Any, browser_page: Any, screenshots: Path
) -> None:
    """The execution page with its heap (for the docs)."""
    from playwright.sync_api import expect

    from yieldstar_django.models import Execution, ExecutionStep

    execution = Execution.objects.create(
        id="checkout-91c2",
        workflow_id="shop.checkout",
        status="waiting",
        input_json='{"args":["A-17"],"kwargs":{}}',
        waiting_on="3",
        runs=2,
    )
    for position, (kind, value) in enumerate(
        [("run", '{"card":"ok"}'), ("get", '{"stock":12}'), ("update", '{"version":2}')]
    ):
        ExecutionStep.objects.create(
            execution=execution,
            step_key=str(position),
            position=position,
            kind=kind,
            status="completed",
            value_json=value,
            fingerprint=f"shop.{kind}",
        )
    ExecutionStep.objects.create(
        execution=execution,
        step_key="3",
        position=3,
        kind="take",
        status="pending",
        fingerprint="inventory/warehouse-1",
    )
    page = browser_page
    page.goto(
        f"{live_server.url}/admin/login/?next=/admin/yieldstar/execution/checkout-91c2/change/"
    )
    page.fill("#id_username", admin_user.username)
    page.fill("#id_password", "password")
    page.click("input[type=submit]")
    expect(page.locator("#steps")).to_contain_text("inventory/warehouse-1")
    page.screenshot(path=str(screenshots / "admin-execution.png"), full_page=True)


def test_patch_decision_filter(live_server: Any, admin_user: Any, browser_page: Any) -> None:
    """The executions list's patch decision form, as the versioning how-to has an operator
    use it: type the change id, choose ``false``, submit; only the execution kept on the
    old branch is listed, and the other filters' parameters survive the submit."""
    from playwright.sync_api import expect

    from yieldstar_django.models import Execution, ExecutionStep

    for execution_id, decision in [("order-old", "false"), ("order-new", "true")]:
        execution = Execution.objects.create(
            id=execution_id, workflow_id="shop.fulfil", status="sleeping", input_json="{}"
        )
        ExecutionStep.objects.create(
            execution=execution,
            step_key="patch:confirmation-mail",
            position=1,
            kind="patch",
            status="completed",
            value_json=decision,
            fingerprint="patch",
        )
    Execution.objects.create(
        id="order-plain", workflow_id="shop.fulfil", status="sleeping", input_json="{}"
    )
    page = browser_page
    page.goto(
        f"{live_server.url}/admin/login/?next=/admin/yieldstar/execution/%3Fstatus__exact%3Dsleeping"
    )
    page.fill("#id_username", admin_user.username)
    page.fill("#id_password", "password")
    page.click("input[type=submit]")
    expect(page.locator("#result_list")).to_contain_text("order-plain")

    page.fill("#yieldstar-patch-id", "confirmation-mail")
    page.select_option("#yieldstar-patch-decision", "false")
    page.click("form.yieldstar-patch-filter input[type=submit]")
    expect(page.locator("#result_list")).to_contain_text("order-old")
    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(1)
    assert "status__exact=sleeping" in page.url
    assert "patched=false" in page.url


def log_in(page: Any, url: str, user: Any) -> None:
    page.goto(f"{url}/admin/login/?next=/admin/")
    page.fill("#id_username", user.username)
    page.fill("#id_password", "password")
    page.click("input[type=submit]")


def test_cancel_asks_first(live_server: Any, admin_user: Any, browser_page: Any) -> None:
    """The execution page's *Cancel execution* button leads to a confirmation page; the
    execution is cancelled only by its *Yes, cancel them*."""
    from playwright.sync_api import expect

    from yieldstar_django.models import Execution

    Execution.objects.create(
        id="to-cancel", workflow_id="shop.checkout", status="waiting", input_json="{}"
    )
    page = browser_page
    log_in(page, live_server.url, admin_user)
    page.goto(f"{live_server.url}/admin/yieldstar/execution/to-cancel/change/")
    page.click("button[value=cancel_executions]")
    expect(page.locator("#content")).to_contain_text("1 unfinished execution")
    assert Execution.objects.get(pk="to-cancel").status == "waiting"
    page.click("input[value='Yes, cancel them']")
    expect(page.locator(".messagelist")).to_contain_text("Cancelled 1 execution(s)")
    assert Execution.objects.get(pk="to-cancel").status == "cancelled"


def test_release_now_across_all_pages(live_server: Any, admin_user: Any, browser_page: Any) -> None:
    """*Release now* on Django's "Select all N items" (more leases than a page holds)
    releases every held lease the list selects once confirmed."""
    from datetime import timedelta

    from django.utils import timezone
    from playwright.sync_api import expect

    from yieldstar_django.connector import get_store_client
    from yieldstar_django.models import ClaimLeaseRecord

    queue = define_store(
        "browser-queue",
        None,
        initial=lambda id: {"items": []},
        release=lambda draft, value: draft["items"].append(value),
    )
    try:
        count = 101  # the list shows 100 a page
        expires = timezone.now() + timedelta(minutes=5)
        ClaimLeaseRecord.objects.bulk_create(
            ClaimLeaseRecord(
                id=f"holder-{n}/0",
                execution_id=f"holder-{n}",
                step_key="0",
                store_name=queue.name,
                store_id="q",
                value_json=str(n),
                expires_at=expires,
            )
            for n in range(count)
        )
        page = browser_page
        log_in(page, live_server.url, admin_user)
        page.goto(f"{live_server.url}/admin/yieldstar/claimleaserecord/")
        page.check("#action-toggle")
        page.click(f"text=Select all {count}")
        page.select_option("select[name=action]", "release_now")
        page.click("button[name=index]")
        expect(page.locator("#content")).to_contain_text(f"All {count} held leases")
        assert set(ClaimLeaseRecord.objects.values_list("state", flat=True)) == {"held"}
        page.click("input[value='Yes, release them']")
        expect(page.locator(".messagelist")).to_contain_text(f"Released {count} lease(s)")
        assert set(ClaimLeaseRecord.objects.values_list("state", flat=True)) == {"released"}
        items = get_store_client().get_store(queue, "q").state["items"]
        assert sorted(items) == list(range(count))
    finally:
        unregister_store(queue.name)
