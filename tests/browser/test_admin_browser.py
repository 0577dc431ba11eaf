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


TRACEBACK = (
    "Traceback (most recent call last):\n"
    + "".join(
        f'  File "/srv/shop/payments/gateways/{"provider/" * 6}client_{n}.py", line {40 + n}, '
        f"in charge\n    response = session.post(url, json={{'amount': amount, "
        f"'currency': currency, 'idempotency_key': key, 'attempt': {n}}}, timeout=5)\n"
        for n in range(6)
    )
    + "shop.payments.CardDeclined: the card ending 4242 was declined (do_not_honor)"
)


def execution_with_a_takeover(now: Any) -> Any:
    """A failed checkout: run 1 read the stock and its charge failed (a retryable error),
    run 2 died in the retried charge, run 3 took over, charged again and failed it; then a
    second execution waiting on a store after a sleep, with a retry pending."""
    import json
    from datetime import timedelta

    from yieldstar_django.models import Execution, ExecutionRun, ExecutionStep

    t0 = now - timedelta(seconds=45)

    def at(seconds: float) -> Any:
        return t0 + timedelta(seconds=seconds)

    error = {"type": "CardDeclined", "message": "the card ending 4242 was declined"}
    execution = Execution.objects.create(
        id="checkout-91c2",
        workflow_id="shop.checkout",
        status="failed",
        input_json='{"args":["A-17"],"kwargs":{}}',
        runs=3,
        created_at=t0,
        finished_at=at(31.318),
        error_json=json.dumps({**error, "traceback": TRACEBACK}),
    )
    runs = [
        (1, "web-1:4101", 0.004, 0.081, "retrying"),
        (2, "worker-2:5202", 10.093, None, ""),
        (3, "worker-3:6303", 30.412, 31.318, "failed"),
    ]
    ExecutionRun.objects.bulk_create(
        ExecutionRun(
            execution=execution,
            number=number,
            lease_owner=f"{number:032d}",
            worker=worker,
            started_at=at(start),
            ended_at=at(end) if end is not None else None,
            outcome=outcome,
        )
        for number, worker, start, end, outcome in runs
    )
    steps = [
        ("0", "get", "inventory/warehouse-1", "completed", 1, 0.006, 0.0094, '{"apples":12}', ""),
        ("1", "update", "inventory/warehouse-1", "completed", 1, 0.010, 0.0161, '{"v":3}', ""),
        (
            "charge",
            "run",
            "shop.payments.charge",
            "failed",
            2,
            0.017,
            31.301,
            "",
            json.dumps({**error, "traceback": TRACEBACK}),
        ),
    ]
    ExecutionStep.objects.bulk_create(
        ExecutionStep(
            execution=execution,
            step_key=key,
            position=position,
            kind=kind,
            fingerprint=fingerprint,
            status=status,
            attempts=attempts,
            created_at=at(start),
            recorded_at=at(end),
            value_json=value,
            error_json=error_json,
        )
        for position, (
            key,
            kind,
            fingerprint,
            status,
            attempts,
            start,
            end,
            value,
            error_json,
        ) in enumerate(steps)
    )
    waiting = Execution.objects.create(
        id="fulfil-8a1b",
        workflow_id="shop.fulfil",
        status="waiting",
        input_json='{"args":["A-17"],"kwargs":{}}',
        waiting_on="pick",
        runs=4,
        created_at=t0,
    )
    ExecutionRun.objects.bulk_create(
        ExecutionRun(
            execution=waiting,
            number=number,
            lease_owner=f"{number:032d}",
            worker=worker,
            started_at=at(start),
            ended_at=at(end),
            outcome=outcome,
        )
        for number, worker, start, end, outcome in [
            (1, "web-1:4101", 0.002, 0.019, "retrying"),
            (2, "worker-2:5202", 5.003, 5.021, "retrying"),
            (3, "worker-3:6303", 10.002, 10.016, "sleeping"),
            (4, "worker-2:5202", 20.004, 20.031, "waiting"),
        ]
    )
    ExecutionStep.objects.bulk_create(
        [
            ExecutionStep(
                execution=waiting,
                step_key="notify",
                position=0,
                kind="run",
                fingerprint="shop.mail.send_confirmation",
                status="completed",
                attempts=3,
                value_json='"sent"',
                created_at=at(0.004),
                recorded_at=at(10.009),
            ),
            ExecutionStep(
                execution=waiting,
                step_key="cool-off",
                position=1,
                kind="sleep",
                status="completed",
                wake_at=at(20.0),
                created_at=at(10.011),
                recorded_at=at(20.014),
            ),
            ExecutionStep(
                execution=waiting,
                step_key="pick",
                position=2,
                kind="take",
                fingerprint="inventory/warehouse-1",
                status="pending",
                created_at=at(20.016),
            ),
        ]
    )
    return execution


def test_execution_page(
    live_server: Any,
    admin_user: Any,
    browser_page: Any,
    screenshots: Path,
    inventory: StoreDefinition,
) -> None:
    """The execution page as a timeline: runs and steps on one axis with millisecond times
    and durations, the run that never let its lease go and the takeover, the step that ran
    twice, the traceback in full; and it fits a 1,280-pixel window (for the docs too)."""
    from django.utils import timezone
    from playwright.sync_api import expect

    client = seed(inventory)
    execution_with_a_takeover(timezone.now())
    page = browser_page
    page.goto(
        f"{live_server.url}/admin/login/?next=/admin/yieldstar/execution/checkout-91c2/change/"
    )
    page.fill("#id_username", admin_user.username)
    page.fill("#id_password", "password")
    page.click("input[type=submit]")
    timeline = page.locator("#timeline")
    expect(timeline).to_contain_text("1 taken over after a run never let its lease go")
    expect(timeline).to_contain_text("1 step ran twice")
    expect(timeline).to_contain_text("worker-2:5202")
    expect(timeline).to_contain_text("run 3 took over at")
    expect(timeline).to_contain_text("ran twice: run 2 (worker-2:5202)")
    expect(page.locator("#steps")).to_contain_text("inventory/warehouse-1")
    # The traceback is readable in full: pre-formatted, wrapped, every line there.
    traceback = page.locator(".field-pretty_error pre.yieldstar-traceback")
    expect(traceback).to_contain_text("client_5.py")
    expect(traceback).to_contain_text("do_not_honor")
    assert traceback.evaluate("e => getComputedStyle(e).whiteSpace") == "pre-wrap"
    assert traceback.evaluate("e => e.scrollWidth <= e.clientWidth")
    # No horizontal scrolling at 1,280 pixels.
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 1280
    # The bars sit inside their tracks.
    bars = page.locator("#timeline .yieldstar-tl-bar")
    assert bars.count() == 6
    for index in range(bars.count()):
        bar = bars.nth(index).bounding_box()
        track = bars.nth(index).locator("xpath=..").bounding_box()
        assert bar is not None and track is not None
        assert (
            track["x"] - 1 <= bar["x"]
            and bar["x"] + bar["width"] <= track["x"] + track["width"] + 1
        )
    page.screenshot(path=str(screenshots / "admin-execution.png"), full_page=True)
    timeline.screenshot(path=str(screenshots / "admin-execution-timeline.png"))

    snapshot = client.get_store(inventory, "warehouse-1")
    client.register_waiter(
        StoreWaiter(
            "shop.fulfil",
            "fulfil-8a1b",
            "pick",
            "inventory",
            "warehouse-1",
            snapshot.instance_id,
            snapshot.version,
            (("stock", "apples"),),
        )
    )
    page.goto(f"{live_server.url}/admin/yieldstar/execution/fulfil-8a1b/change/")
    waiting = page.locator("#timeline")
    expect(waiting).to_contain_text("waits on inventory/warehouse-1")
    expect(waiting).to_contain_text("sleeps until")
    expect(waiting).to_contain_text("3 attempts")
    expect(page.locator(".field-pretty_waiting_on")).to_contain_text(
        "inventory/warehouse-1 (step pick)"
    )
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 1280
    waiting.screenshot(path=str(screenshots / "admin-execution-waiting.png"))


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
