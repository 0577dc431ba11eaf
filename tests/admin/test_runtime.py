"""The execution, wake intent and idempotency key admins through Django's test client."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from yieldstar_django.models import (
    Execution,
    ExecutionStep,
    IdempotencyKey,
    WakeIntent,
)
from yieldstar_django.runtime import start_workflow

from ..api import workflows  # noqa: F401  (registers api-test-greet)
from .conftest import confirm_fields, count_queries

pytestmark = pytest.mark.django_db

EXECUTIONS = reverse("admin:yieldstar_execution_changelist")
WAKE_INTENTS = reverse("admin:yieldstar_wakeintent_changelist")


def execution_url(execution_id: str) -> str:
    return reverse("admin:yieldstar_execution_change", args=[quote(execution_id)])


def make_execution(execution_id: str, steps: int = 0, **fields: Any) -> Execution:
    start_workflow("api-test-greet", "x", execution_id=execution_id)
    Execution.objects.filter(pk=execution_id).update(**fields)
    execution = Execution.objects.get(pk=execution_id)
    ExecutionStep.objects.bulk_create(
        ExecutionStep(
            execution=execution,
            step_key=str(n),
            position=n,
            kind="run",
            status="completed",
            value_json=f'{{"n":{n}}}',
            fingerprint="tests.fn",
        )
        for n in range(steps)
    )
    return execution


class TestExecutions:
    def test_a_page_lists_its_children_and_links_its_parent(self, admin_client: Client) -> None:
        make_execution("family")
        make_execution("family:0", parent="family", status="completed")
        make_execution("family:1", parent="family", status="failed")
        page = admin_client.get(execution_url("family")).content.decode()
        assert "Children (started with step.start)" in page
        for child in ("family:0", "family:1"):
            assert f'href="{execution_url(child)}"' in page
        assert "failed" in page
        assert f"{EXECUTIONS}?parent=family" in page
        child_page = admin_client.get(execution_url("family:0")).content.decode()
        assert f'<a href="{execution_url("family")}">family</a>' in child_page
        assert "It started no child." in child_page

    def test_the_list_filters_by_parent(self, admin_client: Client) -> None:
        make_execution("kin")
        make_execution("kin:0", parent="kin")
        make_execution("stranger")
        listed = admin_client.get(EXECUTIONS, {"parent": "kin"}).context["cl"].result_list
        assert [e.id for e in listed] == ["kin:0"]
        top = admin_client.get(EXECUTIONS, {"parent": "-"}).context["cl"].result_list
        assert sorted(e.id for e in top) == ["kin", "stranger"]

    def test_list_has_no_n_plus_one(
        self, admin_client: Client, django_assert_max_num_queries: Any
    ) -> None:
        make_execution("e-0")
        few, _ = count_queries(admin_client, EXECUTIONS)
        for n in range(1, 40):
            make_execution(f"e-{n}")
        many, html = count_queries(admin_client, EXECUTIONS)
        assert "e-39" in html
        assert many == few
        with django_assert_max_num_queries(8):
            admin_client.get(EXECUTIONS)

    def test_filters_and_search(self, admin_client: Client) -> None:
        make_execution("order-1")
        make_execution("order-2", status="completed")
        make_execution("other-3")
        _, html = count_queries(admin_client, EXECUTIONS + "?status__exact=completed")
        assert "order-2" in html and "order-1" not in html
        _, html = count_queries(admin_client, EXECUTIONS + "?q=order-")
        assert "order-1" in html and "other-3" not in html
        _, html = count_queries(admin_client, EXECUTIONS + "?workflow=api-test-greet")
        assert "other-3" in html

    def test_page_of_an_id_the_admin_quotes(self, admin_client: Client) -> None:
        """An id holding characters the admin quotes in URLs (``/``, ``_``) gets its whole
        page: the heap and the buttons, not only the form."""
        make_execution("tenant/7_a", steps=2, status="failed", error_json='{"message":"boom"}')
        html = admin_client.get(execution_url("tenant/7_a")).content.decode()
        assert "boom" in html and "tests.fn" in html and "{&quot;n&quot;:1}" in html

    def test_page_with_steps_status_and_error(self, admin_client: Client) -> None:
        make_execution(
            "broken",
            steps=3,
            status="failed",
            error_json='{"message":"boom","traceback":"Traceback ...","type":"ValueError"}',
        )
        count_queries(admin_client, execution_url("broken"))  # warms caches
        few, html = count_queries(admin_client, execution_url("broken"))
        assert "boom" in html and "Traceback ..." in html
        assert "</span> failed" in html
        assert "tests.fn" in html and "{&quot;n&quot;:2}" in html
        ExecutionStep.objects.bulk_create(
            ExecutionStep(
                execution_id="broken",
                step_key=str(n),
                position=n,
                kind="run",
                status="completed",
                value_json="1",
            )
            for n in range(3, 130)
        )
        many, html = count_queries(admin_client, execution_url("broken"))
        assert many == few
        assert "steps=3#steps" in html
        assert admin_client.get(execution_url("broken") + "?steps=3").status_code == 200

    def test_resume_action(
        self, admin_client: Client, wakes: list[Any], django_capture_on_commit_callbacks: Any
    ) -> None:
        make_execution("stuck", status="running")
        make_execution("done", status="completed")
        before = WakeIntent.objects.count()
        with django_capture_on_commit_callbacks(execute=True):
            response = admin_client.post(
                EXECUTIONS,
                {"action": "resume_executions", "_selected_action": ["stuck", "done"]},
                follow=True,
            )
        assert response.status_code == 200
        assert "Requested a run of 1 execution(s)" in response.content.decode()
        assert WakeIntent.objects.count() == before + 1
        assert [w.execution_id for w in wakes] == ["stuck"]

    def test_cancel_action_asks_first(self, admin_client: Client) -> None:
        """*Cancel* is irreversible: the action shows a confirmation page listing the
        unfinished executions it will cancel, and cancels them only when that page's form
        is posted back."""
        make_execution("to-cancel", status="waiting")
        make_execution("finished", status="completed")
        data = {"action": "cancel_executions", "_selected_action": ["to-cancel", "finished"]}
        confirm = admin_client.post(EXECUTIONS, data)
        assert confirm.status_code == 200
        body = confirm.content.decode()
        assert "Yes, cancel them" in body
        assert "to-cancel" in body and "api-test-greet" in body
        assert 'name="csrfmiddlewaretoken"' in body
        assert Execution.objects.get(pk="to-cancel").status == "waiting"
        fields = confirm_fields(body)
        assert fields["post"] == ["yes"] and fields["action"] == ["cancel_executions"]
        assert fields["_selected_action"] == ["to-cancel", "finished"]
        response = admin_client.post(EXECUTIONS, fields, follow=True)
        assert "Cancelled 1 execution(s)" in response.content.decode()
        assert Execution.objects.get(pk="to-cancel").status == "cancelled"
        assert Execution.objects.get(pk="finished").status == "completed"

    def test_cancel_across_all_pages(self, admin_client: Client) -> None:
        """With "Select all N items" the confirmation carries ``select_across``: confirming
        cancels every unfinished execution the list selects (as filtered), no other."""
        for n in range(3):
            make_execution(f"across-{n}", status="waiting")
        make_execution("across-sleeping", status="sleeping")
        url = EXECUTIONS + "?status__exact=waiting"
        data = {"action": "cancel_executions", "select_across": "1", "index": "0"}
        confirm = admin_client.post(url, {**data, "_selected_action": ["across-0"]})
        body = confirm.content.decode()
        assert "Yes, cancel them" in body
        assert "across-2" in body and "across-sleeping" not in body
        assert set(Execution.objects.values_list("status", flat=True)) == {"waiting", "sleeping"}
        response = admin_client.post(url, confirm_fields(body), follow=True)
        assert "Cancelled 3 execution(s)" in response.content.decode()
        statuses = dict(Execution.objects.values_list("id", "status"))
        assert statuses == {
            "across-0": "cancelled",
            "across-1": "cancelled",
            "across-2": "cancelled",
            "across-sleeping": "sleeping",
        }

    def test_cancel_confirmation_needs_the_csrf_token(self, admin_user: Any) -> None:
        """The confirming post is CSRF-protected: without the token it is refused, and
        nothing is cancelled."""
        make_execution("forged", status="waiting")
        client = Client(enforce_csrf_checks=True)
        client.force_login(admin_user)
        data = {"action": "cancel_executions", "_selected_action": ["forged"], "post": "yes"}
        assert client.post(EXECUTIONS, data).status_code == 403
        assert Execution.objects.get(pk="forged").status == "waiting"

    def test_get_never_cancels(self, admin_client: Client) -> None:
        make_execution("got", status="waiting")
        query = "?action=cancel_executions&_selected_action=got&post=yes&index=0"
        assert admin_client.get(EXECUTIONS + query).status_code in (200, 302)
        assert Execution.objects.get(pk="got").status == "waiting"

    def test_buttons_on_the_page(self, admin_client: Client) -> None:
        make_execution("buttons", status="waiting")
        _, html = count_queries(admin_client, execution_url("buttons"))
        assert 'value="cancel_executions"' in html
        make_execution("over", status="completed")
        _, html = count_queries(admin_client, execution_url("over"))
        assert 'value="cancel_executions"' not in html

    def test_cancel_button_on_the_page_asks_first(self, admin_client: Client) -> None:
        """The page's *Cancel execution* button (its form: the execution's id, the
        action) leads to the same confirmation page; the execution runs on until it is
        confirmed."""
        make_execution("button", status="waiting")
        _, html = count_queries(admin_client, execution_url("button"))
        assert confirm_fields(html)["_selected_action"] == ["button"]
        data = {"action": "cancel_executions", "_selected_action": ["button"], "index": "0"}
        confirm = admin_client.post(EXECUTIONS, data)
        assert confirm.status_code == 200
        assert "Yes, cancel them" in confirm.content.decode()
        assert Execution.objects.get(pk="button").status == "waiting"
        admin_client.post(EXECUTIONS, confirm_fields(confirm.content.decode()))
        assert Execution.objects.get(pk="button").status == "cancelled"

    def test_viewer_cannot_operate(self, staff: Callable[[str], Client]) -> None:
        make_execution("guarded", status="waiting")
        viewer = staff("viewer")
        _, html = count_queries(viewer, EXECUTIONS)
        assert "cancel_executions" not in html
        data = {"action": "cancel_executions", "_selected_action": ["guarded"]}
        for confirmed in (False, True):
            response = viewer.post(EXECUTIONS, {**data, "post": "yes"} if confirmed else data)
            assert response.status_code in (200, 302, 403)
            assert "Yes, cancel them" not in response.content.decode()
            assert Execution.objects.get(pk="guarded").status == "waiting"
        _, html = count_queries(viewer, execution_url("guarded"))
        assert 'value="cancel_executions"' not in html
        editor = staff("editor")
        confirm = editor.post(EXECUTIONS, data)
        assert "Yes, cancel them" in confirm.content.decode()
        assert Execution.objects.get(pk="guarded").status == "waiting"
        editor.post(EXECUTIONS, {**data, "post": "yes"})
        assert Execution.objects.get(pk="guarded").status == "cancelled"

    def test_read_only(self, admin_client: Client) -> None:
        make_execution("ro")
        assert admin_client.get(reverse("admin:yieldstar_execution_add")).status_code == 403
        response = admin_client.post(execution_url("ro"), {"status": "completed"})
        assert response.status_code == 403
        assert Execution.objects.get(pk="ro").status == "pending"


class TestWakeIntents:
    def make(self, n: int, delivered: bool = False) -> WakeIntent:
        now = timezone.now()
        return WakeIntent.objects.create(
            execution_id=f"w-{n}",
            workflow_id="api-test-greet",
            reason="timer",
            available_at=now,
            delivered_at=now if delivered else None,
            attempts=2,
            last_error="ConnectionError: broker down",
            created_at=now,
        )

    def test_list_and_filter(self, admin_client: Client) -> None:
        self.make(0)
        few, _ = count_queries(admin_client, WAKE_INTENTS)
        for n in range(1, 40):
            self.make(n, delivered=n % 2 == 0)
        many, html = count_queries(admin_client, WAKE_INTENTS)
        assert many == few
        assert "broker down" in html
        _, html = count_queries(admin_client, WAKE_INTENTS + "?delivered=no")
        assert ">w-1<" in html and ">w-2<" not in html
        _, html = count_queries(admin_client, WAKE_INTENTS + "?q=w-3")
        assert ">w-3<" in html and ">w-1<" not in html

    def test_delivered_on_commit_is_not_shown_later_than_delivered(
        self, admin_client: Client
    ) -> None:
        now = timezone.now()
        WakeIntent.objects.create(  # as an immediate wake acknowledged by its first run
            execution_id="w-now",
            workflow_id="api-test-greet",
            reason="wake",
            available_at=now + timedelta(seconds=5),
            delivered_at=now + timedelta(milliseconds=30),
            created_at=now,
        )
        _, html = count_queries(admin_client, WAKE_INTENTS)
        assert "on commit" in html
        assert "Deliverable from" in html

    def test_deliver_again(self, admin_client: Client, wakes: list[Any]) -> None:
        pending = self.make(1)
        delivered = self.make(2, delivered=True)
        response = admin_client.post(
            WAKE_INTENTS,
            {"action": "deliver_again", "_selected_action": [pending.pk, delivered.pk]},
            follow=True,
        )
        assert "Delivered 2 wake(s) again." in response.content.decode()
        assert sorted(w.execution_id for w in wakes) == ["w-1", "w-2"]
        pending.refresh_from_db()
        # Handed over, not acknowledged: only a run of the execution acknowledges it.
        assert pending.delivered_at is None

    def test_deliver_again_reports_a_failing_backend(
        self, admin_client: Client, settings: Any
    ) -> None:
        def refuse(wakes: Any) -> None:
            raise ConnectionError("broker down")

        settings.YIELDSTAR = {**settings.YIELDSTAR, "WAKE_BACKEND": refuse}
        intent = self.make(1)
        response = admin_client.post(
            WAKE_INTENTS, {"action": "deliver_again", "_selected_action": [intent.pk]}, follow=True
        )
        assert "refused the wakes" in response.content.decode()
        intent.refresh_from_db()
        assert intent.delivered_at is None
        assert intent.attempts == 3

    def test_viewer_sees_no_action(self, staff: Callable[[str], Client], wakes: list[Any]) -> None:
        intent = self.make(1)
        viewer = staff("viewer")
        _, html = count_queries(viewer, WAKE_INTENTS)
        assert "deliver_again" not in html
        viewer.post(WAKE_INTENTS, {"action": "deliver_again", "_selected_action": [intent.pk]})
        assert wakes == []

    def test_read_only(self, admin_client: Client) -> None:
        intent = self.make(1)
        assert admin_client.get(reverse("admin:yieldstar_wakeintent_add")).status_code == 403
        url = reverse("admin:yieldstar_wakeintent_change", args=[intent.pk])
        assert admin_client.get(url).status_code == 200
        assert admin_client.post(url, {"attempts": 0}).status_code == 403


def test_idempotency_keys(admin_client: Client, django_user_model: Any) -> None:
    IdempotencyKey.objects.create(
        principal="http:1", key="k-1", fingerprint="f" * 64, method="PUT", target="stores/a/b"
    )
    url = reverse("admin:yieldstar_idempotencykey_changelist")
    _, html = count_queries(admin_client, url)
    assert "k-1" in html
    assert admin_client.get(reverse("admin:yieldstar_idempotencykey_add")).status_code == 403


def idempotency_key(principal: str, key: str) -> IdempotencyKey:
    return IdempotencyKey.objects.create(
        principal=principal, key=key, fingerprint="f" * 64, method="PUT", target="stores/a/b"
    )


def test_idempotency_key_search_is_an_exact_match_on_the_key(admin_client: Client) -> None:
    """The search finds the keys equal to the term, byte for byte (a key is an opaque,
    case-sensitive header value), and compares the key column with ``=``, which an index
    serves (Django's ``=key`` search compares ``UPPER("key")``, which none does)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    idempotency_key("http:1", "Order-7f3a")
    idempotency_key("http:2", "Order-7f3a")
    idempotency_key("http:1", "order-7f3a")
    idempotency_key("http:1", "Order-7f3a-retry")
    url = reverse("admin:yieldstar_idempotencykey_changelist")
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(url, {"q": " Order-7f3a "})
    assert response.status_code == 200
    found = response.context["cl"].result_list
    assert sorted((row.principal, row.key) for row in found) == [
        ("http:1", "Order-7f3a"),
        ("http:2", "Order-7f3a"),
    ]
    table = connection.ops.quote_name(IdempotencyKey._meta.db_table)
    column = f"{table}.{connection.ops.quote_name('key')}"
    searches = [q["sql"] for q in queries.captured_queries if f"FROM {table}" in q["sql"]]
    assert searches
    for sql in searches:
        assert f"WHERE {column} = " in sql, sql
        assert "UPPER(" not in sql and "LIKE" not in sql, sql


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_idempotency_key_search_reads_an_index() -> None:
    """On a table large enough for the planner to care, the search's query reads an index
    on the key, not the whole table."""
    from django.contrib import admin as django_admin
    from django.db import connection
    from django.test import RequestFactory

    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {IdempotencyKey._meta.db_table} "
            "(principal, key, fingerprint, method, target, instance_id, shared, created_at) "
            "SELECT 'http:' || (n % 50), 'key-' || n, repeat('f', 64), 'PUT', "
            "'stores/a/' || n, '', false, now() FROM generate_series(1, 50000) AS n"
        )
        cursor.execute(f"ANALYZE {IdempotencyKey._meta.db_table}")
    model_admin = django_admin.site._registry[IdempotencyKey]
    request = RequestFactory().get("/")
    queryset, _ = model_admin.get_search_results(request, IdempotencyKey.objects.all(), "key-4242")
    assert [row.key for row in queryset] == ["key-4242"]
    plan = queryset.explain()
    assert "Seq Scan" not in plan, plan
    assert "yieldstar_idem_key_idx" in plan, plan  # not a full scan of the unique index
