"""The authorization matrix: every endpoint x method x {anonymous, no permission, view,
change, repair (change with retry and fork)}. A new endpoint or method that is not in
``MATRIX`` fails ``test_matrix_covers_every_endpoint``."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.urls import URLPattern, reverse

from yieldstar_django.api import urls as api_urls
from yieldstar_django.connector import get_store_client as store_client
from yieldstar_django.core.definition import StoreDefinition
from yieldstar_django.models import Execution, Schedule, StoreInstance
from yieldstar_django.runtime import cancel_execution, start_workflow
from yieldstar_django.runtime.schedules import create_schedule

from . import workflows  # noqa: F401  (registers the workflow)

pytestmark = pytest.mark.django_db

LEVELS = ["anonymous", "noperm", "view", "change", "repair"]
SUCCESS = {"GET": 200, "HEAD": 200, "OPTIONS": 200, "PUT": 200, "PATCH": 200, "DELETE": 204}

#: (url name, method) -> (least level allowed, status on success)
MATRIX: dict[tuple[str, str], tuple[str, int]] = {
    ("root", "GET"): ("view", 200),
    ("root", "HEAD"): ("view", 200),
    ("root", "OPTIONS"): ("view", 200),
    ("schema", "GET"): ("view", 200),
    ("schema", "HEAD"): ("view", 200),
    ("schema", "OPTIONS"): ("view", 200),
    ("store-list", "GET"): ("view", 200),
    ("store-list", "HEAD"): ("view", 200),
    ("store-list", "OPTIONS"): ("view", 200),
    ("store-ids", "GET"): ("view", 200),
    ("store-ids", "HEAD"): ("view", 200),
    ("store-ids", "OPTIONS"): ("view", 200),
    ("store-detail", "GET"): ("view", 200),
    ("store-detail", "HEAD"): ("view", 200),
    ("store-detail", "OPTIONS"): ("view", 200),
    ("store-detail", "PUT"): ("change", 200),
    ("store-detail", "PATCH"): ("change", 200),
    ("store-detail", "DELETE"): ("change", 204),
    ("execution-list", "GET"): ("view", 200),
    ("execution-list", "HEAD"): ("view", 200),
    ("execution-list", "POST"): ("change", 201),
    ("execution-list", "OPTIONS"): ("view", 200),
    ("execution-detail", "GET"): ("view", 200),
    ("execution-detail", "HEAD"): ("view", 200),
    ("execution-detail", "OPTIONS"): ("view", 200),
    ("execution-cancel", "POST"): ("change", 200),
    ("execution-cancel", "OPTIONS"): ("change", 200),
    ("execution-retry", "POST"): ("repair", 200),
    ("execution-retry", "OPTIONS"): ("repair", 200),
    ("execution-fork", "POST"): ("repair", 201),
    ("execution-fork", "OPTIONS"): ("repair", 200),
    ("schedule-list", "GET"): ("view", 200),
    ("schedule-list", "HEAD"): ("view", 200),
    ("schedule-list", "OPTIONS"): ("view", 200),
    ("schedule-list", "POST"): ("change", 201),
    ("schedule-detail", "GET"): ("view", 200),
    ("schedule-detail", "HEAD"): ("view", 200),
    ("schedule-detail", "OPTIONS"): ("view", 200),
    ("schedule-pause", "POST"): ("change", 200),
    ("schedule-pause", "OPTIONS"): ("change", 200),
    ("schedule-resume", "POST"): ("change", 200),
    ("schedule-resume", "OPTIONS"): ("change", 200),
    ("schedule-trigger", "POST"): ("change", 201),
    ("schedule-trigger", "OPTIONS"): ("change", 200),
    # Any other URL under the prefix: a JSON 404 for everyone.
    ("not-found", "GET"): ("anonymous", 404),
    ("not-found", "HEAD"): ("anonymous", 404),
    ("not-found", "OPTIONS"): ("anonymous", 404),
    ("not-found", "POST"): ("anonymous", 404),
    ("not-found", "PUT"): ("anonymous", 404),
    ("not-found", "PATCH"): ("anonymous", 404),
    ("not-found", "DELETE"): ("anonymous", 404),
}

EXECUTION_ID = "matrix-execution"
SCHEDULE = "matrix-schedule"


def served_endpoints() -> set[tuple[str, str]]:
    """(url name, METHOD) for every pattern of ``yieldstar_django.api.urls``."""
    found = set()
    for pattern in api_urls.urlpatterns:
        assert isinstance(pattern, URLPattern), pattern
        view_class: Any = pattern.callback.view_class  # type: ignore[attr-defined]
        methods = {m for m in view_class.http_method_names if hasattr(view_class, m)}
        if "get" in methods:
            methods.add("head")
        assert pattern.name, f"unnamed pattern {pattern.pattern}"
        found |= {(pattern.name, method.upper()) for method in methods}
    return found


def test_matrix_covers_every_endpoint() -> None:
    served = served_endpoints()
    missing = sorted(served - MATRIX.keys())
    stale = sorted(MATRIX.keys() - served)
    assert not missing, f"endpoints missing from the authorization matrix: {missing}"
    assert not stale, f"matrix entries for endpoints that do not exist: {stale}"


def request(client: Client, name: str, method: str) -> Any:
    """Send a valid request for ``name``/``method``."""
    args: list[str] = {
        "store-ids": ["api-counter"],
        "store-detail": ["api-counter", "matrix"],
        "execution-detail": [EXECUTION_ID],
        "execution-cancel": [EXECUTION_ID],
        "execution-retry": [EXECUTION_ID],
        "execution-fork": [EXECUTION_ID],
        "schedule-detail": [SCHEDULE],
        "schedule-pause": [SCHEDULE],
        "schedule-resume": [SCHEDULE],
        "schedule-trigger": [SCHEDULE],
        "not-found": ["no/such/endpoint/"],
    }.get(name, [])
    url = reverse(f"yieldstar:{name}", args=args)
    body: Any = None
    content_type = "application/json"
    if (name, method) == ("store-detail", "PUT"):
        body = {"count": 3}
    elif (name, method) == ("store-detail", "PATCH"):
        body, content_type = {"count": 4}, "application/merge-patch+json"
    elif (name, method) == ("execution-list", "POST"):
        body = {"workflow": "api-test-greet", "args": ["matrix"]}
    elif (name, method) == ("execution-fork", "POST"):
        body = {"from_step": 0}
    elif (name, method) == ("schedule-list", "POST"):
        body = {"name": "matrix-new", "workflow": "api-test-greet", "every": 60, "args": ["x"]}
    call = getattr(client, method.lower())
    if body is None and method == "POST":  # a bodiless write: JSON, or no Content-Type
        return call(url, content_type="application/json")
    if body is None:
        return call(url)
    return call(url, json.dumps(body), content_type=content_type)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize(("name", "method"), sorted(MATRIX))
def test_matrix(
    client_for: Callable[[str], Client],
    counter: StoreDefinition,
    name: str,
    method: str,
    level: str,
) -> None:
    start_workflow("api-test-greet", "matrix", execution_id=EXECUTION_ID)
    create_schedule(SCHEDULE, "api-test-greet", every=3600, args=["matrix"])
    if name == "execution-retry":
        cancel_execution(EXECUTION_ID)  # a retry needs a failed or cancelled execution
    if (name, method) in {("store-detail", "GET"), ("store-detail", "HEAD")}:
        store_client().get_store(counter, "matrix")  # a read needs a store (it never creates)
    stores_before = list(StoreInstance.objects.values_list("store_id", "version"))
    least, success = MATRIX[(name, method)]
    response = request(client_for(level), name, method)
    if LEVELS.index(level) >= LEVELS.index(least):
        assert response.status_code == success, response.content
    else:
        expected = (401, 403) if level == "anonymous" else (403,)
        assert response.status_code in expected, response.content
        if method != "HEAD":
            assert response["Content-Type"].startswith("application/json")
            assert "detail" in response.json()
        # A refused write changed nothing.
        assert list(StoreInstance.objects.values_list("store_id", "version")) == stores_before
        execution = Execution.objects.get(pk=EXECUTION_ID)
        assert execution.status == ("cancelled" if name == "execution-retry" else "pending")
        assert execution.retries == 0
        assert Execution.objects.count() == 1
        assert list(Schedule.objects.values_list("name", "paused")) == [(SCHEDULE, False)]


def test_session_writes_need_csrf(counter: StoreDefinition, client_for: Any) -> None:
    from django.contrib.auth.models import User

    client = Client(enforce_csrf_checks=True)
    client_for("change")  # creates the user
    client.force_login(User.objects.get(username="change"))
    url = reverse("yieldstar:store-detail", args=["api-counter", "csrf"])
    response = client.put(url, json.dumps({"count": 1}), content_type="application/json")
    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]
    assert not StoreInstance.objects.filter(store_id="csrf").exists()
    # With the token it goes through.
    client.get(reverse("admin:login"))
    token = client.cookies["csrftoken"].value
    response = client.put(
        url,
        json.dumps({"count": 1}),
        content_type="application/json",
        headers={"X-CSRFToken": token},
    )
    assert response.status_code == 200, response.content


def test_basic_authentication(counter: StoreDefinition, client_for: Any) -> None:
    import base64

    client_for("view")
    credentials = base64.b64encode(b"view:pw").decode()
    client = Client(headers={"Authorization": f"Basic {credentials}"})
    url = reverse("yieldstar:store-detail", args=["api-counter", "basic"])
    store_client().get_store(counter, "basic")
    assert client.get(url).status_code == 200
    assert client.put(url, "{}", content_type="application/json").status_code == 403
    bad = Client(headers={"Authorization": "Basic " + base64.b64encode(b"view:no").decode()})
    assert bad.get(url).status_code in (401, 403)


def test_hook_narrows_change(private: StoreDefinition, api: Client) -> None:
    closed = reverse("yieldstar:store-detail", args=["api-private", "closed"])
    opened = reverse("yieldstar:store-detail", args=["api-private", "open-1"])
    store_client().get_store(private, "closed")
    assert api.get(closed).status_code == 200
    response = api.put(closed, json.dumps({"secret": 2}), content_type="application/json")
    assert response.status_code == 403
    assert api.get(closed).json()["state"] == {"secret": 1}
    assert api.delete(closed).status_code == 403
    response = api.put(opened, json.dumps({"secret": 2}), content_type="application/json")
    assert response.status_code == 200


def test_hook_hides_a_definition(
    hidden: StoreDefinition, counter: StoreDefinition, api: Client
) -> None:
    names = [d["name"] for d in api.get(reverse("yieldstar:store-list")).json()]
    assert "api-counter" in names
    assert "api-hidden" not in names
    assert api.get(reverse("yieldstar:store-ids", args=["api-hidden"])).status_code == 403
    detail = reverse("yieldstar:store-detail", args=["api-hidden", "x"])
    assert api.get(detail).status_code == 403
    assert not StoreInstance.objects.filter(name="api-hidden").exists()


def test_superuser_passes(counter: StoreDefinition, django_user_model: Any) -> None:
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root", password="pw"))
    assert client.get(reverse("yieldstar:store-list")).status_code == 200


def schema_store_names(client: Client) -> list[list[str] | None]:
    """The ``enum`` of every ``name`` path parameter of the schema (``None``: no enum)."""
    response = client.get(reverse("yieldstar:schema"))
    assert response.status_code == 200, response.content
    return [
        parameter["schema"].get("enum")
        for item in response.json()["paths"].values()
        for operation in item.values()
        for parameter in operation.get("parameters", [])
        if parameter["in"] == "path" and parameter["name"] == "name"
    ]


def test_the_schema_names_only_the_definitions_the_user_may_view(
    counter: StoreDefinition, hidden: StoreDefinition, client_for: Any
) -> None:
    """The schema lists the definitions the user may view, as the API root does: those the
    hook lets through, and none to a user without ``view_storeinstance`` (who may open the
    schema with another ``yieldstar`` permission)."""
    viewer = schema_store_names(client_for("view"))
    assert viewer and all(names and "api-counter" in names for names in viewer)
    assert all("api-hidden" not in names for names in viewer if names)

    executions_only = Client()
    executions_only.force_login(make_user_with("execution-viewer", ["view_execution"]))
    assert executions_only.get(reverse("yieldstar:root")).json()["stores"] == []
    named = schema_store_names(executions_only)
    assert named and all(names is None for names in named), named


def make_user_with(username: str, codenames: list[str]) -> Any:
    from django.contrib.auth.models import Permission, User

    user = User.objects.create_user(username, password="pw")
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="yieldstar", codename__in=codenames)
    )
    return user
