"""The store admin through Django's test client: lists, the store page, the editor."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.db import connection, connections
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tests.polling import join_or_fail
from yieldstar_django.connector import get_store_client
from yieldstar_django.core.definition import StoreDefinition, define_store, unregister_store
from yieldstar_django.core.results import StoreWaiter
from yieldstar_django.core.store import StoreClient
from yieldstar_django.models import AppliedStep, StoreInstance, StoreVersion, Waiter

from .conftest import count_queries

pytestmark = pytest.mark.django_db

LIST = reverse("admin:yieldstar_storeinstance_changelist")


def page_url(client: StoreClient, definition: StoreDefinition, id: str) -> str:
    client.get_store(definition, id)
    pk = StoreInstance.objects.get(name=definition.name, store_id=id).pk
    return reverse("admin:yieldstar_storeinstance_change", args=[quote(pk)])


def add_waiter(client: StoreClient, definition: StoreDefinition, id: str, n: int) -> None:
    snapshot = client.get_store(definition, id)
    client.register_waiter(
        StoreWaiter(
            "wf",
            f"exec-{id}-{n}",
            "0",
            definition.name,
            id,
            snapshot.instance_id,
            snapshot.version,
            (("count",),),
        )
    )


def list_queries(admin_client: Client, url: str = LIST) -> tuple[int, str]:
    return count_queries(admin_client, url)


class TestList:
    def test_columns_and_waiter_counts(
        self, admin_client: Client, counters: StoreDefinition, store_client: StoreClient
    ) -> None:
        for n in range(3):
            add_waiter(store_client, counters, "with-waiters", n)
        store_client.get_store(counters, "lonely")
        _, html = list_queries(admin_client)
        row = re.search(r"<tr[^>]*>(?:(?!</tr>).)*with-waiters(?:(?!</tr>).)*</tr>", html, re.S)
        assert row is not None
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(0), re.S)
        assert cells[-1] == "3"  # waiter count
        assert "lonely" in html

    def test_no_n_plus_one(
        self,
        admin_client: Client,
        counters: StoreDefinition,
        store_client: StoreClient,
        django_assert_max_num_queries: Any,
    ) -> None:
        for n in range(3):
            store_client.get_store(counters, f"few-{n}")
            add_waiter(store_client, counters, f"few-{n}", 0)
        few, _ = list_queries(admin_client)
        for n in range(60):
            store_client.get_store(counters, f"many-{n}")
            add_waiter(store_client, counters, f"many-{n}", 0)
        many, html = list_queries(admin_client)
        assert "many-59" in html
        assert many == few
        with django_assert_max_num_queries(8):
            admin_client.get(LIST)

    def test_filter_and_search(
        self, admin_client: Client, counters: StoreDefinition, store_client: StoreClient
    ) -> None:
        other = define_store("admin-other", None, initial=lambda id: {})
        try:
            store_client.get_store(counters, "order-1")
            store_client.get_store(counters, "order-2")
            store_client.get_store(counters, "invoice-1")
            store_client.get_store(other, "order-9")
            _, html = list_queries(admin_client, f"{LIST}?name=admin-counter")
            assert "order-1" in html and "invoice-1" in html and "order-9" not in html
            _, html = list_queries(admin_client, f"{LIST}?q=order-")
            assert "order-1" in html and "order-9" in html and "invoice-1" not in html
            list_queries(admin_client, f"{LIST}?q=%00")  # refused by Django's search form
        finally:
            unregister_store(other.name)

    def test_read_only(self, admin_client: Client, counters: StoreDefinition) -> None:
        assert admin_client.get(reverse("admin:yieldstar_storeinstance_add")).status_code == 403
        _, html = list_queries(admin_client)
        assert "delete_selected" not in html

    def test_viewer_and_anonymous(
        self,
        client: Client,
        staff: Callable[[str], Client],
        counters: StoreDefinition,
        store_client: StoreClient,
    ) -> None:
        url = page_url(store_client, counters, "v")
        assert client.get(LIST).status_code == 302  # to the login page
        viewer = staff("viewer")
        assert viewer.get(LIST).status_code == 200
        response = viewer.get(url)
        assert response.status_code == 200
        assert b'name="state_json"' not in response.content
        response = viewer.post(url, {"state_json": '{"count": 9}'})
        assert response.status_code == 403
        assert store_client.get_store(counters, "v").state == {"count": 0, "tags": []}


@pytest.mark.postgres
@pytest.mark.slow
def test_a_million_rows_are_never_counted(admin_client: Client, counters: StoreDefinition) -> None:
    """The list of a million stores counts nothing: the planner's estimate pages it, and a
    filtered list is counted with a LIMIT."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO yieldstar_storeinstance "
            "(name, store_id, instance_id, version, state, created_at, updated_at) "
            "SELECT 'admin-counter', 'bulk-' || lpad(i::text, 7, '0'), md5(i::text), 0, "
            "'{\"count\":0}', now(), now() FROM generate_series(1, 1000000) AS i"
        )
        cursor.execute("ANALYZE yieldstar_storeinstance")
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(LIST)
    assert response.status_code == 200
    assert "bulk-0000001" in response.content.decode()
    counts = [q["sql"] for q in queries if q["sql"].upper().startswith("SELECT COUNT(")]
    store_counts = [sql for sql in counts if "yieldstar_storeinstance" in sql]
    assert store_counts == [], store_counts  # the estimate was used
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(f"{LIST}?name=admin-counter&q=bulk-00")
    assert response.status_code == 200
    counted = [q["sql"] for q in queries if q["sql"].upper().startswith("SELECT COUNT(")]
    assert counted and all("LIMIT" in sql.upper() for sql in counted), counted


class TestStorePage:
    def test_state_history_waiters_ledger(
        self, admin_client: Client, counters: StoreDefinition, store_client: StoreClient
    ) -> None:
        from yieldstar_django.core.results import StoreStepId

        url = page_url(store_client, counters, "page")
        store_client.update_store(counters, "page", updater=lambda d: d.update(count=1))
        store_client.update_store(
            counters,
            "page",
            updater=lambda d: d["tags"].append("x"),
            step_id=StoreStepId("exec-a", "step-3"),
        )
        add_waiter(store_client, counters, "page", 0)
        response = admin_client.get(url)
        assert response.status_code == 200
        html = response.content.decode()
        assert "&quot;count&quot;: 1" in html  # pretty state in the editor
        assert "$.count" in html  # changed paths of version 1
        assert "$.tags" in html
        assert 'class="yieldstar-add">+    &quot;x&quot;' in html  # diff of version 2
        assert "exec-a / step-3" in html  # by which step
        assert "exec-page-0" in html  # the waiter
        assert "step-3" in html and "update" in html  # the ledger entry

    def test_queries_bounded_by_pages(
        self, admin_client: Client, counters: StoreDefinition, store_client: StoreClient
    ) -> None:
        from yieldstar_django.core.results import StoreStepId

        url = page_url(store_client, counters, "busy")
        store_client.update_store(
            counters, "busy", updater=lambda d: d.update(count=1), step_id=StoreStepId("e", "s")
        )
        add_waiter(store_client, counters, "busy", 99)
        # Warm the process's caches first (ContentType's), so both counts are the page's own.
        assert admin_client.get(url).status_code == 200
        with CaptureQueriesContext(connection) as few:
            assert admin_client.get(url).status_code == 200

        for n in range(60):
            store_client.update_store(
                counters,
                "busy",
                updater=lambda d: d.update(count=d["count"] + 1),
                step_id=StoreStepId("e", f"s{n}"),
            )
            add_waiter(store_client, counters, "busy", n)
        with CaptureQueriesContext(connection) as many:
            response = admin_client.get(url)
        assert response.status_code == 200
        assert len(many) == len(few)
        html = response.content.decode()
        assert "?versions=2#versions" in html or "versions=2" in html
        assert "ledger=2" in html
        older = admin_client.get(url + "?versions=3&ledger=3")
        assert older.status_code == 200

    def test_orphan_store_is_read_only(
        self, admin_client: Client, store_client: StoreClient
    ) -> None:
        gone = define_store("admin-gone", None, initial=lambda id: {"a": 1})
        url = page_url(store_client, gone, "x")
        unregister_store(gone.name)
        response = admin_client.get(url)
        assert response.status_code == 200
        assert b'name="state_json"' not in response.content
        assert b"&quot;a&quot;: 1" in response.content


def form_data(admin_client: Client, url: str) -> dict[str, Any]:
    """The hidden fields of the editor as rendered, with its text."""
    html = admin_client.get(url).content.decode()
    data = {}
    for name in ["expected_instance_id", "expected_version", "edit_token"]:
        match = re.search(rf'name="{name}" value="([^"]*)"', html)
        assert match, name
        data[name] = match.group(1)
    return data


class TestEditor:
    def test_save_compare_and_swaps(
        self, admin_client: Client, counters: StoreDefinition, store_client: StoreClient
    ) -> None:
        url = page_url(store_client, counters, "edit")
        data = form_data(admin_client, url)
        response = admin_client.post(url, {**data, "state_json": '{"count": 5, "tags": ["a"]}'})
        assert response.status_code == 302, response.content.decode()[:3000]
        snapshot = store_client.get_store(counters, "edit")
        assert snapshot.state == {"count": 5, "tags": ["a"]}
        assert snapshot.version == 1
        version = StoreVersion.objects.get(store_id="edit", version=1)
        assert version.step_execution_id is not None and version.step_execution_id.startswith(
            "admin:"
        )
        # A second submit of the same form (double click) is the same edit, not a conflict.
        again = admin_client.post(url, {**data, "state_json": '{"count": 5, "tags": ["a"]}'})
        assert again.status_code == 302
        assert store_client.get_store(counters, "edit").version == 1

    def test_the_same_form_sent_again_with_another_text_is_a_conflict(
        self, admin_client: Client, counters: StoreDefinition, store_client: StoreClient
    ) -> None:
        """The browser's Back button brings the saved form back (its token, the version it
        was opened at): another edit sent from it is not the double click of the first,
        and must not be reported as saved while nothing of it is written."""
        url = page_url(store_client, counters, "back")
        data = form_data(admin_client, url)
        assert admin_client.post(url, {**data, "state_json": '{"count": 5}'}).status_code == 302
        response = admin_client.post(url, {**data, "state_json": '{"count": 9}'})
        assert response.status_code == 200
        html = response.content.decode()
        assert "you opened version 0 and it is now at version 1" in html
        assert "Your changes were NOT saved" in html
        assert store_client.get_store(counters, "back").state == {"count": 5}

    def test_conflict_is_shown_and_nothing_is_written(
        self, admin_client: Client, counters: StoreDefinition, store_client: StoreClient
    ) -> None:
        url = page_url(store_client, counters, "race")
        data = form_data(admin_client, url)
        store_client.update_store(counters, "race", updater=lambda d: d.update(count=7))
        response = admin_client.post(url, {**data, "state_json": '{"count": 1}'})
        assert response.status_code == 200
        html = response.content.decode()
        assert "Someone else changed this store while you were editing it" in html
        assert "you opened version 0 and it is now at version 1" in html
        assert store_client.get_store(counters, "race").state == {"count": 7, "tags": []}
        assert not StoreVersion.objects.filter(store_id="race", version=2).exists()

    def test_recreated_store_is_a_conflict(
        self, admin_client: Client, counters: StoreDefinition, store_client: StoreClient
    ) -> None:
        url = page_url(store_client, counters, "again")
        data = form_data(admin_client, url)
        row = StoreInstance.objects.get(store_id="again")
        # Same row, another instance (as after a delete and re-creation).
        StoreInstance.objects.filter(pk=row.pk).update(instance_id="other-instance")
        response = admin_client.post(url, {**data, "state_json": '{"count": 1}'})
        assert response.status_code == 200
        assert "deleted and created again" in response.content.decode()

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("{not json", "This is not valid JSON"),
            ('{"count": NaN}', "This is not valid JSON"),
            ("null", "cannot be null"),
            ('{"count": -1}', "$.count: -1 is less than the minimum of 0"),
            ('{"tags": []}', "&#x27;count&#x27; is a required property"),
            ('{"count": 1, "s": "\\u0000"}', "not a durable value"),
        ],
    )
    def test_invalid_edits(
        self,
        admin_client: Client,
        counters: StoreDefinition,
        store_client: StoreClient,
        text: str,
        message: str,
    ) -> None:
        url = page_url(store_client, counters, "bad")
        data = form_data(admin_client, url)
        response = admin_client.post(url, {**data, "state_json": text})
        assert response.status_code == 200
        assert message in response.content.decode()
        assert store_client.get_store(counters, "bad").version == 0

    def test_editor_permission(
        self, staff: Callable[[str], Client], counters: StoreDefinition, store_client: StoreClient
    ) -> None:
        url = page_url(store_client, counters, "perm")
        editor = staff("editor")
        data = form_data(editor, url)
        response = editor.post(url, {**data, "state_json": '{"count": 2}'})
        assert response.status_code == 302
        assert store_client.get_store(counters, "perm").state == {"count": 2}

    def test_hook_narrows_the_admin(self, admin_client: Client, store_client: StoreClient) -> None:
        locked = define_store(
            "admin-locked",
            None,
            initial=lambda id: {"a": 1},
            permission=lambda request, action, id: action == "view",
        )
        hidden = define_store(
            "admin-hidden", None, initial=lambda id: {}, permission=lambda r, a, i: False
        )
        try:
            url = page_url(store_client, locked, "x")
            response = admin_client.get(url)
            assert response.status_code == 200
            assert b'name="state_json"' not in response.content
            assert admin_client.post(url, {"state_json": "{}"}).status_code == 403
            hidden_url = page_url(store_client, hidden, "y")
            assert admin_client.get(LIST).content.decode().count("admin-hidden") == 0
            assert admin_client.get(hidden_url).status_code == 302  # not found: redirected
        finally:
            unregister_store(locked.name)
            unregister_store(hidden.name)

    @pytest.mark.parametrize("why", ["too large", "orphan"])
    def test_a_store_shown_read_only_refuses_edits(
        self, admin_client: Client, store_client: StoreClient, why: str
    ) -> None:
        """A store whose editor is not offered (its state is over the editor's limit, or
        its definition is gone) has no Save button, and a hand-built POST of the editor's
        fields is refused, with a message, and writes nothing."""
        from yieldstar_django.admin.stores import MAX_EDIT_CHARS

        blob = "x" * (MAX_EDIT_CHARS if why == "too large" else 10)
        definition = define_store("admin-read-only", None, initial=lambda id: {"blob": blob})
        try:
            url = page_url(store_client, definition, "r")
            row = StoreInstance.objects.get(name=definition.name, store_id="r")
            assert (len(row.state) > MAX_EDIT_CHARS) == (why == "too large")
            if why == "orphan":
                unregister_store(definition.name)
            page = admin_client.get(url)
            assert page.status_code == 200
            assert b'name="state_json"' not in page.content
            assert b'name="_save"' not in page.content
            assert b'name="_continue"' not in page.content
            assert b"Shown read-only: its " in page.content
            edit = {
                "state_json": '{"blob": "edited"}',
                "expected_instance_id": row.instance_id,
                "expected_version": "0",
                "edit_token": "hand-built",
                "_save": "Save",
            }
            for data in [edit, {"_save": "Save"}]:
                response = admin_client.post(url, data, follow=True)
                assert response.status_code == 200
                html = response.content.decode()
                assert "This store cannot be edited in the admin" in html, why
                assert "Nothing was saved" in html
                row.refresh_from_db()
                assert row.version == 0
                assert "edited" not in row.state
            assert not StoreVersion.objects.filter(
                store_name=definition.name, store_id="r", version=1
            ).exists()
        finally:
            unregister_store(definition.name)

    @pytest.mark.django_db(transaction=True)
    def test_an_edit_racing_a_delete_does_not_create_the_store_again(
        self, admin_client: Client, store_client: StoreClient
    ) -> None:
        """Another client deletes the store after the editor's POST found its row and before
        the edit's compare-and-swap: the edit is a conflict that says so, and the store
        stays deleted (the compare-and-swap must not create it from ``initial`` first)."""
        deleted: list[str] = []

        def delete_from_another_connection(request: Any, action: str, id: str | None) -> bool:
            if action == "change" and id == "raced" and not deleted:
                deleted.append(id)
                thread = threading.Thread(target=delete_store, args=[definition, id])
                thread.start()
                join_or_fail(thread, what="the delete from another connection")

            return True

        def delete_store(definition: StoreDefinition, id: str) -> None:
            try:
                get_store_client().delete_store(definition, id)
            finally:
                connections.close_all()

        definition = define_store(
            "admin-raced",
            None,
            initial=lambda id: {"fresh": True},
            permission=delete_from_another_connection,
        )
        try:
            url = page_url(store_client, definition, "raced")
            store_client.update_store(definition, "raced", updater=lambda d: d.update(n=1))
            deleted.append("not yet")  # the page is opened without deleting anything
            data = form_data(admin_client, url)
            deleted.clear()
            response = admin_client.post(url, {**data, "state_json": '{"n": 2}'})
            assert deleted == ["raced"]
            assert response.status_code == 200
            assert not StoreInstance.objects.filter(name="admin-raced").exists()
            html = response.content.decode()
            assert "Your changes were NOT saved" in html
            assert "it was deleted since" in html
        finally:
            unregister_store(definition.name)

    def test_an_editable_store_has_a_save_button(
        self, admin_client: Client, counters: StoreDefinition, store_client: StoreClient
    ) -> None:
        response = admin_client.get(page_url(store_client, counters, "save"))
        assert b'name="state_json"' in response.content
        assert b'name="_save"' in response.content


def test_waiter_rows_are_not_editable(admin_client: Client) -> None:
    for model in [Waiter, AppliedStep, StoreVersion]:
        assert model._meta.model_name
    # Only stores, executions, wake intents, idempotency keys, claim leases and schedules
    # are registered.
    from django.contrib import admin

    registered = {
        m._meta.model_name for m in admin.site._registry if m._meta.app_label == "yieldstar"
    }
    assert registered == {
        "storeinstance",
        "execution",
        "wakeintent",
        "idempotencykey",
        "claimleaserecord",
        "schedule",
    }


def test_the_store_page_links_executions_started_with_an_idempotency_key(
    admin_client: Client, counters: StoreDefinition, store_client: StoreClient
) -> None:
    """An execution an ``Idempotency-Key`` start names (``http:<pk>:<digest>``) is a real
    execution: the store page links the steps it wrote to its page. The ledger owners
    ``http:<pk>`` and ``admin:<pk>`` are no executions and get no link."""
    from yieldstar_django.core.results import StoreStepId

    url = page_url(store_client, counters, "linked")
    owners = ["http:1:" + "ab" * 20, "http:1", "admin:1"]
    for n, owner in enumerate(owners):
        store_client.update_store(
            counters,
            "linked",
            updater=lambda d, n=n: d.update(count=n),
            step_id=StoreStepId(owner, "s"),
        )
    html = admin_client.get(url).content.decode()
    links = {
        owner: reverse("admin:yieldstar_execution_change", args=[quote(owner)]) for owner in owners
    }
    assert f'href="{links[owners[0]]}"' in html
    assert f'href="{links["http:1"]}"' not in html
    assert f'href="{links["admin:1"]}"' not in html


@pytest.mark.parametrize("alias", ["default", "sqlite"])
@pytest.mark.django_db(databases=["default", "sqlite"])
def test_the_id_search_is_a_case_sensitive_prefix(alias: str) -> None:
    """The stores' and executions' id search finds the ids that start with the term, case
    included (ids are case-sensitive), on both databases: SQLite's ``LIKE`` ignores the
    case of ASCII letters."""
    from django.contrib import admin as django_admin
    from django.test import RequestFactory
    from django.utils import timezone

    from yieldstar_django.models import Execution

    now = timezone.now()
    ids = ["ab-1", "AB-2", "Ab-3", "xab", "a%b"]
    for id in ids:
        StoreInstance.objects.using(alias).create(
            name="search", store_id=id, instance_id=f"i-{id}", version=0, state="{}",
            created_at=now, updated_at=now,
        )  # fmt: skip
        Execution.objects.using(alias).create(id=id, workflow_id="wf", input_json="{}")
    request = RequestFactory().get("/")
    for model, column in ((StoreInstance, "store_id"), (Execution, "id")):
        model_admin = django_admin.site._registry[model]
        for term, found in (("ab", ["ab-1"]), ("AB", ["AB-2"]), ("a%", ["a%b"]), ("B", [])):
            queryset, _ = model_admin.get_search_results(
                request, model.objects.using(alias).all(), term
            )
            assert sorted(queryset.values_list(column, flat=True)) == found, (model, term)
