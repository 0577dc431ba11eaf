"""Execution endpoints: start (idempotent), read with steps, cancel."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from tests.polling import join_or_fail
from yieldstar_django.api.executions import ID_TAKEN
from yieldstar_django.core.definition import StoreDefinition
from yieldstar_django.models import Execution, ExecutionStep, IdempotencyKey
from yieldstar_django.runtime import start_workflow

from . import workflows  # registers api-test-greet; price is a step function

pytestmark = pytest.mark.django_db

START = "/yieldstar/executions/"


def start(client: Client, body: Any, **headers: str) -> Any:
    return client.post(START, json.dumps(body), content_type="application/json", headers=headers)


def test_start_and_read(api: Client) -> None:
    response = start(
        api, {"workflow": "api-test-greet", "args": ["Ada"], "kwargs": {"punctuation": "?"}}
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["workflow"] == "api-test-greet"
    assert body["status"] == "pending"
    assert body["input"] == {"args": ["Ada"], "kwargs": {"punctuation": "?"}}
    assert response["Location"].endswith(reverse("yieldstar:execution-detail", args=[body["id"]]))
    detail = api.get(response["Location"])
    assert detail.status_code == 200
    assert detail.json()["id"] == body["id"]


def test_read_lists_steps_in_order(api: Client) -> None:
    execution_id = start_workflow("api-test-greet", "x", execution_id="with-steps")
    execution = Execution.objects.get(pk=execution_id)
    for key, kind, status, value_json in [
        ("1", "run", "completed", '{"b":2}'),
        ("0", "sleep", "pending", ""),
    ]:
        ExecutionStep.objects.create(
            execution=execution,
            step_key=key,
            position=int(key),
            kind=kind,
            status=status,
            value_json=value_json,
        )
    steps = api.get(reverse("yieldstar:execution-detail", args=[execution_id])).json()["steps"]
    assert [(s["key"], s["kind"], s["value"]) for s in steps] == [
        ("0", "sleep", None),
        ("1", "run", {"b": 2}),
    ]


def test_start_with_execution_id_is_idempotent(api: Client) -> None:
    body = {"workflow": "api-test-greet", "args": ["x"], "execution_id": "order-7"}
    assert start(api, body).status_code == 201
    again = start(api, body)
    assert again.status_code == 200
    assert again.json()["id"] == "order-7"
    assert Execution.objects.count() == 1


def test_start_with_idempotency_key(api: Client) -> None:
    body = {"workflow": "api-test-greet", "args": ["x"]}
    first = start(api, body, **{"Idempotency-Key": "start-1"})
    assert first.status_code == 201
    again = start(api, body, **{"Idempotency-Key": "start-1"})
    assert again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    other = start(api, {**body, "args": ["y"]}, **{"Idempotency-Key": "start-1"})
    assert other.status_code == 422
    assert Execution.objects.count() == 1


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"workflow": "nope"}, 400, "unknown_workflow"),
        ({"args": []}, 400, "invalid"),
        ({"workflow": "api-test-greet", "args": "x"}, 400, "invalid"),
        ({"workflow": "api-test-greet", "kwargs": {"execution_id": "x"}}, 400, "invalid"),
        ({"workflow": "api-test-greet", "execution_id": "a\u0000"}, 400, "invalid"),
        ({"workflow": "api-test-greet", "execution_id": "\ud800"}, 400, "invalid"),
        ({"workflow": "api-test-greet", "execution_id": "x" * 256}, 400, "invalid"),
        ({"workflow": "api-test-greet", "execution_id": "a/b"}, 400, "invalid"),
        ({"workflow": "api-test-greet", "args": ["a\u0000"]}, 400, "not_durable"),
        ({"workflow": "api-test-greet", "args": [{"\ud800": 1}]}, 400, "not_durable"),
        ([1], 400, "invalid"),
    ],
)
def test_bad_starts(api: Client, body: Any, status: int, code: str) -> None:
    response = start(api, body)
    assert response.status_code == status, response.content
    assert response.json()["code"] == code
    assert not Execution.objects.exists()


@pytest.mark.parametrize(
    "execution_id",
    ["http:1", "http:1:" + "a" * 40, "admin:1", "http:", "admin:", "  http:1:abc"],
)
@pytest.mark.parametrize("key", [None, "start-reserved"])
def test_start_with_a_reserved_execution_id_is_400(
    api: Client, execution_id: str, key: str | None
) -> None:
    """``http:`` and ``admin:`` name the ledger owners of HTTP and admin writes, and
    ``http:<pk>:<digest>`` the execution an ``Idempotency-Key`` start derives: a client
    cannot pick such an id (leading blanks are trimmed first, so they do not hide it)."""
    headers = {"Idempotency-Key": key} if key else {}
    body = {"workflow": "api-test-greet", "args": ["x"], "execution_id": execution_id}
    response = start(api, body, **headers)
    assert response.status_code == 400, response.content
    error = response.json()
    assert error["code"] == "invalid"
    assert "reserved" in error["field_errors"]["execution_id"][0]
    assert not Execution.objects.exists()
    assert not IdempotencyKey.objects.exists()


def test_another_user_cannot_take_the_execution_an_idempotency_key_names(api: Client) -> None:
    """Someone who knows another user's ``Idempotency-Key`` could start, under their own
    name, the execution id the key derives for that user; the user's start was then a
    ``409`` (or a ``200`` on the other's execution). The id is refused now."""
    owner = User.objects.get(username="change")
    other = User.objects.create_user("other", password="pw")
    other.user_permissions.set(
        Permission.objects.filter(content_type__app_label="yieldstar", codename="add_execution")
    )
    intruder = Client()
    intruder.force_login(other)
    digest = hashlib.sha256(b"order-9").hexdigest()[:40]
    derived = f"http:{owner.pk}:{digest}"
    taken = start(
        intruder, {"workflow": "api-test-greet", "args": ["evil"], "execution_id": derived}
    )
    assert taken.status_code == 400, taken.content
    mine = start(
        api, {"workflow": "api-test-greet", "args": ["x"]}, **{"Idempotency-Key": "order-9"}
    )
    assert mine.status_code == 201, mine.content
    assert mine.json()["id"] == derived
    assert mine.json()["input"] == {"args": ["x"], "kwargs": {}}


def starter_client() -> Client:
    """A client of a user who may start executions (``add_execution``) but not read them."""
    user = User.objects.create_user("starter", password="pw")
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="yieldstar", codename="add_execution")
    )
    client = Client()
    client.force_login(user)
    return client


SUMMARY = {"id", "workflow", "status", "created_at", "updated_at", "finished_at", "url"}


def test_a_start_without_view_execution_answers_a_summary(api: Client) -> None:
    """A user who may start executions but not read them (no ``view_execution``) started
    someone else's finished execution again, with its id and arguments, and the ``200``
    answered it whole: its result and its heap, which ``GET`` refuses them (``403``). Such
    a user learns nothing of an execution it may not view: the start is ``409`` with the
    words of any taken id; its own new start answers its summary."""
    from django.utils import timezone

    start_workflow("api-test-greet", "Ada", execution_id="payroll-june")
    Execution.objects.filter(pk="payroll-june").update(
        status="completed", result_json='{"salary":9000}', finished_at=timezone.now()
    )
    ExecutionStep.objects.create(
        execution_id="payroll-june", step_key="0", position=0, kind="run",
        status="completed", value_json='{"iban":"DE00 1234"}',
    )  # fmt: skip
    starter = starter_client()
    detail = reverse("yieldstar:execution-detail", args=["payroll-june"])
    assert starter.get(detail).status_code == 403
    again = start(
        starter, {"workflow": "api-test-greet", "args": ["Ada"], "execution_id": "payroll-june"}
    )
    assert again.status_code == 409, again.content
    assert again.json() == {"detail": ID_TAKEN, "code": "execution_conflict"}
    fresh = start(starter, {"workflow": "api-test-greet", "args": ["Bo"]})
    assert fresh.status_code == 201, fresh.content
    assert set(fresh.json()) == SUMMARY
    assert fresh["Location"] == fresh.json()["url"]
    # A user who may read executions still gets the whole execution.
    full = start(
        api, {"workflow": "api-test-greet", "args": ["Ada"], "execution_id": "payroll-june"}
    )
    assert full.status_code == 200
    assert full.json()["result"] == {"salary": 9000}
    assert full.json()["steps"][0]["value"] == {"iban": "DE00 1234"}


def test_start_existing_id_of_another_workflow_is_409(api: Client) -> None:
    Execution.objects.create(id="taken", workflow_id="something-else", input_json="{}")
    body = {"workflow": "api-test-greet", "execution_id": "taken", "args": ["x"]}
    response = start(api, body)
    assert response.status_code == 409


def test_cancel(api: Client) -> None:
    execution_id = start_workflow("api-test-greet", "x")
    url = reverse("yieldstar:execution-cancel", args=[execution_id])
    response = api.post(url, content_type="application/json")
    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    assert api.post(url).status_code == 415  # a form (the test client's default)
    assert api.post(url, content_type="application/json").status_code == 200  # idempotent
    Execution.objects.filter(pk=execution_id).update(status="completed")
    assert api.post(url, content_type="application/json").status_code == 409


def test_unknown_execution_is_404(api: Client) -> None:
    for url in [
        reverse("yieldstar:execution-detail", args=["nope"]),
        reverse("yieldstar:execution-cancel", args=["nope"]),
        reverse("yieldstar:execution-detail", args=["x" * 300]),
    ]:
        if url.endswith("cancel/"):
            response = api.post(url, content_type="application/json")
        else:
            response = api.get(url)
        assert response.status_code == 404
        assert response.json()["code"] == "not_found"


def list_from(client: Client, position: str) -> Any:
    """``GET executions/`` with a cursor at ``position`` (as DRF encodes one)."""
    cursor = base64.b64encode(urlencode({"p": position}).encode("ascii")).decode("ascii")
    return client.get(f"{START}?cursor={quote(cursor)}")


@pytest.mark.parametrize(
    "position",
    ["9999-12-31T23:59:59-00:01", "0001-01-01T00:00:00+00:01", "9999-12-31T23:59:59-23:00"],
)
def test_list_cursor_at_a_time_out_of_range_is_400(api: Client, position: str) -> None:
    """A forged cursor whose time is past the range of a timestamp (in UTC) is the invalid
    cursor it is (``400 parse_error``, as an invalid store-id cursor), not a 500."""
    start_workflow("api-test-greet", "x")
    response = list_from(api, position)
    assert response.status_code == 400, response.status_code
    assert response.json()["code"] == "parse_error"
    assert response.json()["detail"] == "The cursor is invalid; use the `next` link of a page."


@pytest.mark.parametrize(
    "cursor",
    [
        "%25%25%25",  # not base64
        quote(base64.b64encode(b"o=x").decode("ascii")),  # an offset that is not a number
        quote(base64.b64encode(b"p=yesterday").decode("ascii")),  # a position not a time
        quote(base64.b64encode(b"\xff\xfe").decode("ascii")),  # not text
    ],
)
def test_list_malformed_cursor_is_400_as_for_store_ids(
    api: Client, counter: StoreDefinition, cursor: str
) -> None:
    """A malformed ``cursor`` on ``GET executions/`` is refused as on the store-id list,
    ``400 parse_error`` with the same message, not ``404``: the list exists, the request
    is bad."""
    start_workflow("api-test-greet", "x")
    response = api.get(f"{START}?cursor={cursor}")
    assert response.status_code == 400, response.status_code
    assert response.json()["code"] == "parse_error"
    store_ids = api.get(reverse("yieldstar:store-ids", args=[counter.name]) + "?cursor=%25")
    assert store_ids.status_code == 400  # the store-id list's answer, for comparison
    assert response.json()["detail"] == store_ids.json()["detail"]


@pytest.mark.parametrize("offset", ["+23:59", "-23:00", "+16:00"])
def test_list_cursor_in_any_utc_offset_pages_from_its_time(api: Client, offset: str) -> None:
    """A cursor's time may be written in any UTC offset a datetime can have (PostgreSQL
    takes at most 15:59 in a literal): it pages from that time."""
    start_workflow("api-test-greet", "x", execution_id="listed")
    response = list_from(api, f"2999-01-01T00:00:00{offset}")
    assert response.status_code == 200, response.status_code
    assert [e["id"] for e in response.json()["results"]] == ["listed"]


@pytest.mark.django_db(transaction=True)
def test_cancel_of_an_execution_pruned_meanwhile_is_404(
    api: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``POST .../cancel/`` of an execution finished long ago, while ``yieldstar_prune``
    (another connection) deletes it between the view's read and its answer: the view read
    the row again and failed with ``Execution.DoesNotExist`` (a 500). It is a 404 now."""
    import threading
    from datetime import timedelta

    from django.db import connections
    from django.utils import timezone

    from yieldstar_django.api import executions as views
    from yieldstar_django.retention import prune_finished

    long_ago = timezone.now() - timedelta(days=40)
    Execution.objects.create(
        id="old", workflow_id="api-test-greet", input_json="{}", status="completed",
        finished_at=long_ago,
    )  # fmt: skip
    cancel = views.cancel_execution

    def cancel_then_prune(execution_id: str) -> bool:
        cancelled = cancel(execution_id)

        def prune() -> None:
            try:
                prune_finished(older_than=30 * 24 * 3600)
            finally:
                connections.close_all()

        thread = threading.Thread(target=prune)
        thread.start()
        join_or_fail(thread, what="the prune")
        return cancelled

    monkeypatch.setattr(views, "cancel_execution", cancel_then_prune)
    response = api.post(
        reverse("yieldstar:execution-cancel", args=["old"]), content_type="application/json"
    )
    assert not Execution.objects.filter(pk="old").exists()
    assert response.status_code == 404, response.content
    assert response.json()["code"] == "not_found"


def served_schema(api: Client) -> dict[str, Any]:
    response = api.get(reverse("yieldstar:schema"), headers={"Accept": "application/json"})
    assert response.status_code == 200
    schema: dict[str, Any] = json.loads(response.content)
    return schema


def _json_schema(node: Any) -> Any:
    """An OpenAPI 3.0 schema as JSON Schema: ``nullable: true`` becomes a null choice."""
    if isinstance(node, list):
        return [_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {k: _json_schema(v) for k, v in node.items() if k != "nullable"}
    if node.get("nullable"):
        return {"anyOf": [converted, {"type": "null"}]}
    return converted


def conforms(api: Client, body: Any, component: str) -> None:
    """``body`` is valid against the served OpenAPI schema's ``component``."""
    from jsonschema import Draft7Validator

    components = _json_schema(served_schema(api)["components"])
    Draft7Validator(
        {"$ref": f"#/components/schemas/{component}", "components": components}
    ).validate(body)


def test_the_schema_documents_waits_runs_and_targets(api: Client) -> None:
    schemas = served_schema(api)["components"]["schemas"]
    execution = schemas["Execution"]
    assert {"waiting_on", "wake_at", "runs", "run_history"} <= set(execution["required"])
    assert {"target", "started_at"} <= set(schemas["ExecutionStep"]["required"])
    assert set(schemas["ExecutionRun"]["properties"]) == {
        "number",
        "worker",
        "started_at",
        "ended_at",
        "outcome",
    }
    assert set(schemas["WaitedStore"]["properties"]) == {"store", "id", "step"}


def test_read_names_the_stores_waited_on_the_runs_and_each_steps_target(
    api: Client, counter: StoreDefinition
) -> None:
    """A real execution: a function step, then a take on a store it waits on. Its body
    names the store (not the bare step key), its runs with their worker, and each step's
    target (the function's qualified name, the store and id)."""
    from yieldstar_django.runtime import Step, workflow
    from yieldstar_django.runtime.executions import run_execution
    from yieldstar_django.runtime.leases import worker_name
    from yieldstar_django.runtime.registry import unregister_workflow

    @workflow("api-test-pick")
    def pick(step: Step, shelf: str) -> Any:
        yield from step.run(workflows.price, 3)
        return (yield from step.take(counter, shelf, lambda state: state["items"] or None))

    try:
        execution_id = start_workflow(pick, "shelf-4", execution_id="picker")
        run_execution(execution_id)
        body = api.get(reverse("yieldstar:execution-detail", args=[execution_id])).json()
    finally:
        unregister_workflow("api-test-pick")
    assert body["status"] == "waiting"
    assert body["waiting_on"] == [{"store": "api-counter", "id": "shelf-4", "step": "1"}]
    assert body["wake_at"] is None
    assert body["runs"] == 1
    [run] = body["run_history"]
    assert run["number"] == 1 and run["worker"] == worker_name()
    assert run["outcome"] == "waiting" and run["ended_at"] is not None
    targets = [(s["kind"], s["target"]) for s in body["steps"]]
    assert targets == [
        ("run", {"function": "tests.api.workflows.price"}),
        ("take", {"store": "api-counter", "id": "shelf-4"}),
    ]
    assert all(s["started_at"] is not None for s in body["steps"])
    conforms(api, body, "Execution")
    from jsonschema import ValidationError

    with pytest.raises(ValidationError):  # the check does check
        conforms(api, {**body, "waiting_on": ["api-counter/shelf-4"]}, "Execution")


def test_read_gives_a_sleeping_executions_wake_time(api: Client) -> None:
    from yieldstar_django.runtime.executions import run_execution

    execution_id = start_workflow("api-test-greet", "x", execution_id="sleeper")
    run_execution(execution_id)
    body = api.get(reverse("yieldstar:execution-detail", args=[execution_id])).json()
    assert body["status"] == "sleeping"
    assert body["waiting_on"] == []
    execution = Execution.objects.get(pk=execution_id)
    assert execution.wake_at is not None
    assert body["wake_at"] == execution.wake_at.isoformat().replace("+00:00", "Z")
    assert body["steps"][0]["target"] is None  # a sleep names nothing
    conforms(api, body, "Execution")


def test_list_filters_by_parent_and_bodies_show_it(api: Client) -> None:
    start_workflow("api-test-greet", "p", execution_id="tree-parent")
    for name in ("a", "b"):
        start_workflow("api-test-greet", name, execution_id=f"tree-parent:{name}")
    start_workflow("api-test-greet", "x", execution_id="not-a-child")
    Execution.objects.filter(pk__startswith="tree-parent:").update(parent="tree-parent")
    response = api.get(START + "?" + urlencode({"parent": "tree-parent"}))
    assert response.status_code == 200, response.content
    listed = response.json()["results"]
    assert sorted(e["id"] for e in listed) == ["tree-parent:a", "tree-parent:b"]
    body = api.get(reverse("yieldstar:execution-detail", args=["tree-parent:a"])).json()
    assert (body["parent"], body["deadline"]) == ("tree-parent", None)
    assert (
        api.get(reverse("yieldstar:execution-detail", args=["tree-parent"])).json()["parent"]
        is None
    )
    for nothing in ("", "no-such-parent", "x" * 300):
        response = api.get(START + "?" + urlencode({"parent": nothing}))
        assert response.status_code == 200
        assert response.json()["results"] == []
