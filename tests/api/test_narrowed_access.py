"""What the API shows and does for a user the permission hooks narrow: the ids of a store
list and its counts, executions (a workflow's hook), the answers of writes on executions,
the media types a write takes, and the permission check before a body is parsed."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth.models import Permission, User
from django.db.models import Q
from django.test import Client
from django.urls import reverse

from yieldstar_django.api import store_lists
from yieldstar_django.api.executions import ID_TAKEN
from yieldstar_django.api.parsers import SafeJSONParser
from yieldstar_django.connector import get_store_client
from yieldstar_django.core.definition import StoreDefinition, define_store, unregister_store
from yieldstar_django.models import Execution
from yieldstar_django.runtime import start_workflow, workflow
from yieldstar_django.runtime.registry import unregister_workflow

pytestmark = pytest.mark.django_db

CALLS: list[str | None] = []


def only_own_carts(request: Any, action: str, store_id: str | None) -> bool:
    """The hook of the documentation: a user's own cart only."""
    CALLS.append(store_id)
    return store_id is None or store_id == f"user-{request.user.pk}"


def own_carts_q(request: Any, action: str, store_id: str | None) -> Any:
    """The same, with the ``Q`` of the ids it allows for the definition as a whole."""
    CALLS.append(store_id)
    own = f"user-{request.user.pk}"
    return Q(id=own) if store_id is None else store_id == own


def user(username: str, *codenames: str) -> User:
    made = User.objects.create_user(username, password="pw")
    made.user_permissions.set(
        Permission.objects.filter(content_type__app_label="yieldstar", codename__in=codenames)
    )
    return made


def logged_in(made: User) -> Client:
    client = Client()
    client.force_login(made)
    return client


@pytest.fixture
def carts() -> Iterator[StoreDefinition]:
    definition = define_store("api-carts", None, initial=lambda id: {}, permission=only_own_carts)
    CALLS.clear()
    yield definition
    unregister_store(definition.name)


@pytest.fixture
def q_carts() -> Iterator[StoreDefinition]:
    definition = define_store("api-q-carts", None, initial=lambda id: {}, permission=own_carts_q)
    CALLS.clear()
    yield definition
    unregister_store(definition.name)


def make_stores(definition: StoreDefinition, ids: list[str]) -> None:
    client = get_store_client()
    for store_id in ids:
        client.get_store(definition, store_id)


def ids_url(name: str, **query: str) -> str:
    url = reverse("yieldstar:store-ids", args=[name])
    return url + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")


# --- the store hook on id lists and counts ------------------------------------------------


def test_the_id_list_shows_only_the_ids_the_hook_allows(carts: StoreDefinition) -> None:
    """With the documented ``only_own_carts``, a user with the view permission listed
    every user's cart id through ``GET stores/carts/``."""
    viewer = user("viewer", "view_storeinstance")
    own = f"user-{viewer.pk}"
    make_stores(carts, ["user-0", own, "user-999999", "zz"])
    response = logged_in(viewer).get(ids_url("api-carts"))
    assert response.status_code == 200
    assert response.json() == {"results": [own], "next": None}


def test_pages_of_a_per_id_hook_are_complete_bounded_and_reveal_no_hidden_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hook that answers only per id: each request reads at most ``SCAN_LIMIT`` rows
    (a page may then end early, even empty, with a ``next``), following ``next`` lists
    every allowed id once in order, and no cursor names an id the hook refused."""
    monkeypatch.setattr(store_lists, "SCAN_LIMIT", 7)
    asked: list[str] = []

    def every_fifth(request: Any, action: str, store_id: str | None) -> bool:
        if store_id is not None:
            asked.append(store_id)
        return store_id is None or store_id.endswith(("0", "5"))

    definition = define_store("api-sparse", None, initial=lambda id: {}, permission=every_fifth)
    try:
        every = [f"s{n:03d}" for n in range(60)]
        make_stores(definition, every)
        client = logged_in(user("viewer", "view_storeinstance"))
        calls_per_request: list[int] = []
        url: str | None = ids_url("api-sparse", limit="3")
        seen: list[str] = []
        cursors: list[str] = []
        while url:
            asked.clear()
            response = client.get(url)
            assert response.status_code == 200, response.content
            calls_per_request.append(len(asked))
            seen += response.json()["results"]
            url = response.json()["next"]
            if url:
                cursors += parse_qs(urlsplit(url).query)["cursor"]
        assert seen == [i for i in every if i.endswith(("0", "5"))]
        assert max(calls_per_request) <= 7
        hidden = set(every) - set(seen)
        for cursor in cursors:
            # A plain cursor is the base64 of an id shown; a signed one names a row by key.
            text = cursor.split(":")[0]
            decoded = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            assert not any(h.encode() in decoded for h in hidden), (cursor, decoded)
            assert not any(h in cursor for h in hidden)
    finally:
        unregister_store(definition.name)


def test_a_forged_hidden_cursor_is_400(carts: StoreDefinition) -> None:
    client = logged_in(user("viewer", "view_storeinstance"))
    forged = "eyJuIjoiYXBpLWNhcnRzIiwiciI6MSwiYSI6bnVsbH0:forged:signature"
    response = client.get(ids_url("api-carts", cursor=forged))
    assert response.status_code == 400
    assert response.json()["code"] == "parse_error"


def test_a_q_hook_filters_in_the_database(q_carts: StoreDefinition) -> None:
    """A hook that answers a ``Q`` for the definition: the database filters, and the hook
    is asked only about the ids shown."""
    viewer = user("viewer", "view_storeinstance")
    own = f"user-{viewer.pk}"
    make_stores(q_carts, [f"user-{n}" for n in range(50)] + [own])
    CALLS.clear()
    response = logged_in(viewer).get(ids_url("api-q-carts"))
    assert response.json() == {"results": [own], "next": None}
    assert [None, own] == CALLS


def test_the_counts_count_only_what_the_user_may_see(
    carts: StoreDefinition, q_carts: StoreDefinition
) -> None:
    """The per-definition counts included every store of a hooked definition. Now: a
    ``Q`` hook's count is the ``Q``'s, a per-id hook's is ``null`` (not counted), and a
    definition without a hook counts all."""
    plain = define_store("api-plain", None, initial=lambda id: {})
    try:
        viewer = user("viewer", "view_storeinstance")
        own = f"user-{viewer.pk}"
        for definition in (carts, q_carts, plain):
            make_stores(definition, ["user-0", own, "user-x"])
        listed = logged_in(viewer).get(reverse("yieldstar:store-list")).json()
        counts = {d["name"]: d["instances"] for d in listed}
        assert counts["api-plain"] == 3
        assert counts["api-q-carts"] == 1
        assert counts["api-carts"] is None
    finally:
        unregister_store(plain.name)


def test_a_hook_q_on_another_field_is_refused(carts: StoreDefinition) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from yieldstar_django.api.permissions import id_lookups

    assert id_lookups(Q(id="a") | ~Q(id__startswith="b"), "store_id") == (
        Q(store_id="a") | ~Q(store_id__startswith="b")
    )
    with pytest.raises(ImproperlyConfigured):
        id_lookups(Q(name="a"), "store_id")


# --- executions guarded like stores ----------------------------------------------------------


def cart_hook(request: Any, action: str, target: Any) -> bool:
    """The documented execution hook: a start may name only a cart the user may view,
    and the user sees and cancels only the executions of its own cart."""
    arguments = target if action == "start" else target.input
    cart = arguments["args"][0] if arguments["args"] else None
    return isinstance(cart, str) and only_own_carts(request, "view", cart)


@pytest.fixture
def cart_workflow() -> Iterator[Any]:
    @workflow("api-cart-total", permission=cart_hook)
    def cart_total(step: Any, cart: str) -> Any:
        yield from step.sleep(86400)
        return cart

    yield cart_total
    unregister_workflow("api-cart-total")


def test_a_workflow_hook_must_be_callable() -> None:
    def body(step: Any) -> Any:
        yield from step.sleep(1)

    with pytest.raises(TypeError, match="permission"):
        workflow("api-bad-hook", permission="yes")(body)  # type: ignore[arg-type]


def execution_user(name: str) -> User:
    return user(name, "add_execution", "view_execution", "change_execution")


def test_a_start_may_not_name_a_store_the_hook_refuses(
    carts: StoreDefinition, cart_workflow: Any
) -> None:
    """A user refused ``GET stores/carts/user-1/`` started a workflow with ``user-1`` and
    read the cart in its steps. The workflow's hook refuses the start."""
    shopper = execution_user("shopper")
    client = logged_in(shopper)
    body = {"workflow": "api-cart-total", "args": ["user-0"], "execution_id": "theirs"}
    response = client.post(reverse("yieldstar:execution-list"), body, "application/json")
    assert response.status_code == 403, response.content
    assert not Execution.objects.filter(pk="theirs").exists()
    body = {"workflow": "api-cart-total", "args": [f"user-{shopper.pk}"]}
    response = client.post(reverse("yieldstar:execution-list"), body, "application/json")
    assert response.status_code == 201, response.content


def test_the_execution_hook_guards_list_read_and_cancel(
    carts: StoreDefinition, cart_workflow: Any
) -> None:
    """Whoever could read executions read them all; with a hook, another user's
    execution is neither listed, read nor cancelled (``404``, as if there were none)."""
    shopper = execution_user("shopper")
    client = logged_in(shopper)
    mine = start_workflow("api-cart-total", f"user-{shopper.pk}", execution_id="mine")
    start_workflow("api-cart-total", "user-0", execution_id="theirs")
    listed = client.get(reverse("yieldstar:execution-list")).json()["results"]
    assert [e["id"] for e in listed] == [mine]
    assert client.get(reverse("yieldstar:execution-detail", args=["theirs"])).status_code == 404
    cancel = reverse("yieldstar:execution-cancel", args=["theirs"])
    response = client.post(cancel, content_type="application/json")
    assert response.status_code == 404
    assert Execution.objects.get(pk="theirs").status != "cancelled"
    assert client.get(reverse("yieldstar:execution-detail", args=[mine])).status_code == 200


def cursors_of(page: dict[str, Any]) -> list[str]:
    links = [page["next"], page["previous"]]
    return [parse_qs(urlsplit(link).query)["cursor"][0] for link in links if link]


def readable_forms(cursor: str) -> str:
    """What a client can read out of a cursor: its text and its base64 decodings."""
    forms = [cursor]
    for decode in (base64.b64decode, base64.urlsafe_b64decode):
        for text in (cursor, cursor.removeprefix("s.")):
            try:
                forms.append(decode(text + "=" * (-len(text) % 4)).decode("latin-1"))
            except ValueError:
                pass
    return "\n".join(forms)


def test_the_executions_list_cursors_tell_nothing_of_hidden_executions(
    carts: StoreDefinition, cart_workflow: Any
) -> None:
    """The list's ``next`` and ``previous`` links carried the creation time of the last
    and first execution of the page read, which could be one the hook hid: a page holding
    one has sealed links, which still page through every visible execution once."""
    from datetime import timedelta

    from django.utils import timezone

    shopper = execution_user("shopper")
    client = logged_in(shopper)
    base = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    secrets: list[str] = []
    for n in range(7):
        owner = f"user-{shopper.pk}" if n % 3 == 0 else "user-0"
        execution_id = start_workflow("api-cart-total", owner, execution_id=f"e-{owner}-{n}")
        created = base + timedelta(seconds=n, microseconds=100_001 * (n + 1))
        Execution.objects.filter(pk=execution_id).update(created_at=created)
        if owner == "user-0":
            secrets += [str(created), created.isoformat(), f"{created.microsecond:06d}"]
    visible = [f"e-user-{shopper.pk}-{n}" for n in (6, 3, 0)]  # newest first
    url = reverse("yieldstar:execution-list") + "?limit=2"
    shown: list[str] = []
    pages: list[dict[str, Any]] = []
    while url and len(pages) < 20:
        response = client.get(url)
        assert response.status_code == 200, response.content
        pages.append(response.json())
        shown += [e["id"] for e in pages[-1]["results"]]
        url = pages[-1]["next"]
    assert shown == visible
    back: list[str] = []
    url = pages[-1]["previous"]
    while url and len(pages) < 40:
        pages.append(client.get(url).json())
        back = [e["id"] for e in pages[-1]["results"]] + back
        url = pages[-1]["previous"]
    assert back == visible[:-1]  # every page before the last, read backwards
    cursors = [cursor for page in pages for cursor in cursors_of(page)]
    for cursor in cursors:
        readable = readable_forms(cursor)
        assert not any(secret in readable for secret in secrets), (cursor, readable)
    assert any(cursor.startswith("s.") for cursor in cursors)
    tampered = cursors[0][:-2] + ("A" if cursors[0][-2] != "A" else "B") + cursors[0][-1]
    assert tampered.startswith("s.")
    response = client.get(reverse("yieldstar:execution-list") + f"?cursor={tampered}")
    assert response.status_code == 400
    assert response.json()["code"] == "parse_error"


def test_a_hook_that_refuses_cancel_only_is_403(cart_workflow: Any) -> None:
    def view_only(request: Any, action: str, target: Any) -> bool:
        return action != "cancel"

    cart_workflow.permission = view_only
    start_workflow("api-cart-total", "user-0", execution_id="seen")
    client = logged_in(execution_user("operator"))
    cancel = reverse("yieldstar:execution-cancel", args=["seen"])
    assert client.post(cancel, content_type="application/json").status_code == 403


# --- answers reveal no more than the caller may read -------------------------------------


def test_cancel_answers_id_and_status_to_a_user_who_may_not_view() -> None:
    """Cancel answered the whole execution (input, steps) to a user without
    ``view_execution``: for a cancelled execution, a read with no change."""
    from . import workflows  # noqa: F401  (registers api-test-greet)

    start_workflow("api-test-greet", "secret-name", execution_id="cancel-me")
    client = logged_in(user("canceller", "change_execution"))
    url = reverse("yieldstar:execution-cancel", args=["cancel-me"])
    for _ in range(2):  # the cancel, then a no-op on a cancelled execution
        response = client.post(url, content_type="application/json")
        assert response.status_code == 200, response.content
        assert response.json() == {"id": "cancel-me", "status": "cancelled"}


def test_a_start_only_user_learns_nothing_of_an_execution_it_did_not_create() -> None:
    """A start-only user learned whether an id existed and which workflow it ran (the
    ``409`` named it) and, with equal arguments, its summary: every start naming an
    execution it may not view answers the same ``409``."""
    from . import workflows  # noqa: F401

    start_workflow("api-test-greet", "Ada", execution_id="someone-elses")
    Execution.objects.create(id="other-workflow", workflow_id="payroll", input_json="{}")
    client = logged_in(user("starter", "add_execution"))
    answers = []
    for execution_id, name in [
        ("someone-elses", "Ada"),  # equal arguments
        ("someone-elses", "Bo"),  # other arguments
        ("other-workflow", "Ada"),  # another workflow
    ]:
        body = {"workflow": "api-test-greet", "args": [name], "execution_id": execution_id}
        response = client.post(reverse("yieldstar:execution-list"), body, "application/json")
        answers.append((response.status_code, response.json()))
    assert answers[0] == answers[1] == answers[2]
    assert answers[0][0] == 409
    assert "payroll" not in json.dumps(answers) and "api-test-greet" not in json.dumps(answers)


def test_a_start_only_user_starting_its_own_execution_again_gets_its_first_answer() -> None:
    """A start-only user (may add, may not view) retrying its own start with the same
    ``execution_id`` and arguments got the ``409`` of someone else's execution. The
    execution records who started it (``started_by``): the retry answers the summary its
    first start answered (``200``: it existed), other arguments a ``409`` that says so,
    and to another start-only user the execution stays as unknown as ever."""
    from . import workflows  # noqa: F401

    starter = user("starter", "add_execution")
    client = logged_in(starter)
    url = reverse("yieldstar:execution-list")
    body = {"workflow": "api-test-greet", "args": ["Ada"], "execution_id": "mine"}
    first = client.post(url, body, "application/json")
    again = client.post(url, body, "application/json")
    assert (first.status_code, again.status_code) == (201, 200), again.content
    assert again.json() == first.json()
    assert set(first.json()) == {
        "id", "workflow", "status", "created_at", "updated_at", "finished_at", "url",
    }  # fmt: skip
    assert Execution.objects.get(pk="mine").started_by == f"http:{starter.pk}"
    other_arguments = client.post(url, {**body, "args": ["Bo"]}, "application/json")
    assert other_arguments.status_code == 409
    assert "other arguments" in other_arguments.json()["detail"]
    # Another start-only user: the same 409 as for any taken id, whatever it sends.
    stranger = logged_in(user("stranger", "add_execution"))
    answers = [
        stranger.post(url, {**body, "args": args}, "application/json") for args in (["Ada"], ["Bo"])
    ]
    assert [a.status_code for a in answers] == [409, 409]
    assert (
        answers[0].json()
        == answers[1].json()
        == {
            "detail": ID_TAKEN,
            "code": "execution_conflict",
        }
    )
    assert Execution.objects.get(pk="mine").input == {"args": ["Ada"], "kwargs": {}}


def test_an_idempotency_key_start_answers_its_own_user_again() -> None:
    """The idempotent start a start-only user can rely on: its own key."""
    from . import workflows  # noqa: F401

    client = logged_in(user("starter", "add_execution"))
    body = {"workflow": "api-test-greet", "args": ["Ada"]}
    url = reverse("yieldstar:execution-list")
    first = client.post(url, body, "application/json", headers={"Idempotency-Key": "k-1"})
    again = client.post(url, body, "application/json", headers={"Idempotency-Key": "k-1"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]


# --- writes accept only JSON; permissions before parsing ---------------------------------


def basic_client(username: str) -> Client:
    credentials = base64.b64encode(f"{username}:pw".encode()).decode()
    return Client(headers={"Authorization": f"Basic {credentials}"})


@pytest.mark.parametrize(
    "content_type",
    ["application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "text/plain"],
)
def test_a_cross_site_form_cannot_cancel(content_type: str) -> None:
    """Cancel accepted any content type: with basic authentication first, a browser with
    cached credentials could be driven to cancel by a form of another site, bodiless
    or not."""
    from . import workflows  # noqa: F401

    execution_user("operator")
    start_workflow("api-test-greet", "x", execution_id="victim")
    client = basic_client("operator")
    url = reverse("yieldstar:execution-cancel", args=["victim"])
    for body in ("", "a=1"):  # (the test client sends no Content-Type without a body)
        response = client.generic("POST", url, body, CONTENT_TYPE=content_type)
        assert response.status_code == 415, response.content
        assert response.json()["code"] == "unsupported_media_type"
    assert Execution.objects.get(pk="victim").status != "cancelled"


def test_a_bodiless_write_without_content_type() -> None:
    """``curl -X POST .../cancel/`` (no body, no Content-Type) still cancels; the same
    from a page of another origin (``Sec-Fetch-Site``) must declare JSON."""
    from . import workflows  # noqa: F401

    execution_user("operator")
    start_workflow("api-test-greet", "x", execution_id="bodiless")
    client = basic_client("operator")
    url = reverse("yieldstar:execution-cancel", args=["bodiless"])
    cross = client.generic("POST", url, headers={"Sec-Fetch-Site": "cross-site"})
    assert cross.status_code == 415
    assert Execution.objects.get(pk="bodiless").status != "cancelled"
    assert client.generic("POST", url).status_code == 200
    assert Execution.objects.get(pk="bodiless").status == "cancelled"


@pytest.mark.parametrize("method", ["PUT", "PATCH", "DELETE"])
def test_store_writes_refuse_forms(method: str) -> None:
    definition = define_store("api-json-only", None, initial=lambda id: {"n": 0})
    try:
        user("writer", "view_storeinstance", "change_storeinstance")
        make_stores(definition, ["s"])
        client = basic_client("writer")
        url = reverse("yieldstar:store-detail", args=["api-json-only", "s"])
        form = "application/x-www-form-urlencoded"
        response = client.generic(method, url, "n=1", CONTENT_TYPE=form)
        assert response.status_code == 415, response.content
        assert get_store_client().get_store(definition, "s").version == 0
        if method == "DELETE":  # a bodiless DELETE needs no Content-Type
            assert client.generic("DELETE", url).status_code == 204
    finally:
        unregister_store(definition.name)


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the bodies the JSON parser parsed."""
    parsed: list[int] = []
    original = SafeJSONParser.parse

    def spy(self: Any, stream: Any, *args: Any, **kwargs: Any) -> Any:
        parsed.append(1)
        return original(self, stream, *args, **kwargs)

    monkeypatch.setattr(SafeJSONParser, "parse", spy)
    return parsed


@pytest.mark.parametrize("target", ["start", "cancel"])
def test_a_refused_session_post_is_not_parsed(parses: list[int], target: str) -> None:
    """A session-authenticated POST was parsed whole (up to the body cap) by the CSRF
    check before the permission check refused it."""
    from . import workflows  # noqa: F401

    start_workflow("api-test-greet", "x", execution_id="big")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user("reader", "view_storeinstance"))
    client.get(reverse("admin:login"))
    token = client.cookies["csrftoken"].value
    url = (
        reverse("yieldstar:execution-list")
        if target == "start"
        else reverse("yieldstar:execution-cancel", args=["big"])
    )
    body = json.dumps({"workflow": "api-test-greet", "args": ["x" * (1 << 20)]})
    response = client.post(url, body, "application/json", headers={"X-CSRFToken": token})
    assert response.status_code == 403, response.content
    assert parses == []
    # The check is real: a permitted start parses its body.
    allowed = Client(enforce_csrf_checks=True)
    allowed.force_login(execution_user("starter"))
    allowed.get(reverse("admin:login"))
    token = allowed.cookies["csrftoken"].value
    small = json.dumps({"workflow": "api-test-greet", "args": ["y"]})
    response = allowed.post(
        reverse("yieldstar:execution-list"),
        small,
        "application/json",
        headers={"X-CSRFToken": token},
    )
    assert response.status_code == 201, response.content
    assert parses == [1]
