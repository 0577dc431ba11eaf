"""The API's surface: root, executions list, JSON 404s, 415s that name the accepted
media types, truthful starts and argument checks, ``If-None-Match`` errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied
from django.test import Client
from django.urls import reverse

from yieldstar_django.core.definition import StoreDefinition, define_store, unregister_store
from yieldstar_django.models import Execution
from yieldstar_django.runtime import start_workflow

from . import workflows  # noqa: F401  (registers api-test-greet)

pytestmark = pytest.mark.django_db

START = "/yieldstar/executions/"


def start(client: Client, body: Any) -> Any:
    return client.post(START, json.dumps(body), content_type="application/json")


def test_root_lists_definitions_and_links(api: Client, counter: StoreDefinition) -> None:
    response = api.get("/yieldstar/")
    assert response.status_code == 200
    body = response.json()
    assert {"name": "api-counter", "url": "http://testserver/yieldstar/stores/api-counter/"} in (
        body["stores"]
    )
    assert body["links"] == {
        "stores": "http://testserver/yieldstar/stores/",
        "executions": "http://testserver/yieldstar/executions/",
        "schedules": "http://testserver/yieldstar/schedules/",
        "schema": "http://testserver/yieldstar/schema/",
    }


def test_root_hides_definitions_the_hook_refuses(api: Client, hidden: StoreDefinition) -> None:
    names = [d["name"] for d in api.get("/yieldstar/").json()["stores"]]
    assert "api-hidden" not in names


@pytest.mark.parametrize("path", ["/yieldstar/nope/", "/yieldstar/stores", "/yieldstar/a/b/c"])
@pytest.mark.parametrize("method", ["get", "post", "delete", "options"])
def test_unknown_urls_answer_json_404(client: Client, path: str, method: str) -> None:
    """Any method, ``OPTIONS`` included: DRF's ``OPTIONS`` answered an anonymous client
    ``200`` with the view's metadata (its name and docstring, the media types it renders
    and parses) for any URL under the prefix."""
    response = getattr(client, method)(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json()["code"] == "unknown_endpoint"


def test_415_names_the_accepted_media_types(api: Client, counter: StoreDefinition) -> None:
    url = reverse("yieldstar:store-detail", args=["api-counter", "s"])
    response = api.patch(url, "{}", content_type="application/json")
    assert response.status_code == 415
    body = response.json()
    assert body["accepted_media_types"] == [
        "application/merge-patch+json",
        "application/json-patch+json",
    ]
    assert "application/merge-patch+json" in body["detail"]
    response = api.put(url, "count=1", content_type="text/plain")
    assert response.json()["accepted_media_types"] == ["application/json"]


@pytest.mark.parametrize(
    "path",
    ["/yieldstar/", "/yieldstar/stores/", "/yieldstar/stores/api-counter/s/", START],
)
def test_an_unknown_format_is_a_coded_json_404(
    api: Client, counter: StoreDefinition, path: str
) -> None:
    # DRF's content negotiation raises Django's Http404 for an unknown ?format=; every
    # error of the API carries a "code" (docs/howto/http-api.md, "Errors").
    response = api.get(path, {"format": "yaml"})
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"detail": "Not found.", "code": "not_found"}


def test_a_hook_raising_djangos_permission_denied_is_a_coded_403(
    api: Client, counter: StoreDefinition
) -> None:
    def refuse(request: Any, action: str, store_id: str | None) -> bool:
        raise PermissionDenied("not yours")

    define_store("api-refusing", None, initial=lambda id: {}, permission=refuse)
    try:
        response = api.get("/yieldstar/stores/api-refusing/s/")
    finally:
        unregister_store("api-refusing")
    assert response.status_code == 403
    assert response.json() == {"detail": "not yours", "code": "permission_denied"}


@pytest.mark.parametrize(
    ("method", "content_type", "body"),
    [
        ("patch", "*/*", '[{"op": "replace", "path": "", "value": {"count": 9}}]'),
        ("patch", "application/*", '{"count": 9}'),
        ("patch", "*/*; charset=utf-8", '{"count": 9}'),
        ("put", "*/*", '{"count": 9}'),
        ("put", "application/*", '{"count": 9}'),
    ],
    ids=["patch-any", "patch-application", "patch-any-charset", "put-any", "put-application"],
)
def test_a_wildcard_content_type_is_415(
    api: Client, counter: StoreDefinition, method: str, content_type: str, body: str
) -> None:
    """A body's ``Content-Type`` names one media type; ``*/*`` or ``application/*`` (an
    ``Accept`` range) says nothing about how to read the body, so no parser takes it and
    nothing is written."""
    api.raise_request_exception = False
    url = reverse("yieldstar:store-detail", args=["api-counter", "wild"])
    created = api.put(url, '{"count": 1}', content_type="application/json")
    assert created.status_code == 200, created.content
    response = getattr(api, method)(url, body, content_type=content_type)
    assert response.status_code == 415, response.content
    assert response.json()["code"] == "unsupported_media_type"
    assert api.get(url).json()["state"] == {"count": 1}
    assert api.get(url)["ETag"] == created["ETag"]


def test_a_wildcard_content_type_is_415_for_a_start(api: Client) -> None:
    api.raise_request_exception = False
    body = {"workflow": "api-test-greet", "args": ["ada"], "execution_id": "wild"}
    response = api.post(START, json.dumps(body), content_type="*/*")
    assert response.status_code == 415, response.content
    assert not Execution.objects.filter(pk="wild").exists()


def test_bad_if_none_match_names_the_header(api: Client, counter: StoreDefinition) -> None:
    url = reverse("yieldstar:store-detail", args=["api-counter", "s"])
    response = api.get(url, headers={"If-None-Match": "garbage"})
    assert response.status_code == 400
    assert response.json()["detail"].startswith("If-None-Match ")


class TestStarts:
    def test_equal_arguments_200_other_arguments_409(self, api: Client) -> None:
        body = {"workflow": "api-test-greet", "execution_id": "e", "args": ["ada"]}
        assert start(api, body).status_code == 201
        assert start(api, body).status_code == 200
        response = start(api, {**body, "args": ["bob"]})
        assert response.status_code == 409
        assert response.json()["code"] == "execution_conflict"
        assert Execution.objects.get(pk="e").input == {"args": ["ada"], "kwargs": {}}

    @pytest.mark.parametrize(
        ("args", "kwargs", "problem"),
        [
            ([], {}, "missing a required argument: 'name'"),
            (["a", "b"], {}, "too many positional arguments"),
            (["a"], {"step": 1}, "multiple values for argument 'step'"),
            (["a"], {"exclaim": "!"}, "unexpected keyword argument 'exclaim'"),
        ],
    )
    def test_arguments_are_bound_before_anything_is_stored(
        self, api: Client, args: list[Any], kwargs: dict[str, Any], problem: str
    ) -> None:
        response = start(api, {"workflow": "api-test-greet", "args": args, "kwargs": kwargs})
        assert response.status_code == 400, response.content
        body = response.json()
        assert body["code"] == "invalid_arguments"
        assert problem in body["detail"]
        assert "api-test-greet" in body["detail"]
        assert not Execution.objects.exists()


class TestExecutionList:
    def test_newest_first_with_filters(self, api: Client) -> None:
        ids = [start_workflow("api-test-greet", str(n), execution_id=f"x{n}") for n in range(3)]
        Execution.objects.filter(pk="x0").update(status="completed")
        body = api.get(START).json()
        assert [e["id"] for e in body["results"]] == list(reversed(ids))
        assert body["results"][0]["url"] == "http://testserver/yieldstar/executions/x2/"
        assert body["next"] is None
        done = api.get(START + "?status=completed").json()["results"]
        assert [e["id"] for e in done] == ["x0"]
        assert api.get(START + "?workflow=other").json()["results"] == []
        response = api.get(START + "?status=bogus")
        assert response.status_code == 400
        assert "completed" in response.json()["detail"]

    def test_pages(self, api: Client) -> None:
        for n in range(5):
            start_workflow("api-test-greet", str(n), execution_id=f"p{n}")
        seen: list[str] = []
        url: str | None = START + "?limit=2"
        while url:
            body = api.get(url).json()
            assert len(body["results"]) <= 2
            seen += [e["id"] for e in body["results"]]
            url = body["next"]
        assert sorted(seen) == [f"p{n}" for n in range(5)]
        assert len(seen) == 5

    @pytest.mark.parametrize(
        "limit", ["0", "1001", "99999999", "x", "-1", "1.5", "", "\uff11", "0001001", "0001000000"]
    )
    def test_a_bad_limit_is_400_as_for_store_ids(
        self, api: Client, counter: StoreDefinition, limit: str
    ) -> None:
        """``?limit=`` out of range or not a number is ``400``, with the body the store-id
        list answers, not the default page size."""
        start_workflow("api-test-greet", "x")
        ids = reverse("yieldstar:store-ids", args=["api-counter"])
        response = api.get(START, {"limit": limit})
        assert response.status_code == 400, response.content
        assert response.json()["code"] == "parse_error"
        assert "limit" in response.json()["detail"]
        assert response.json() == api.get(ids, {"limit": limit}).json()

    @pytest.mark.parametrize("limit", ["1", "1000"])
    def test_the_limits_bounds(self, api: Client, limit: str) -> None:
        start_workflow("api-test-greet", "x")
        response = api.get(START, {"limit": limit})
        assert response.status_code == 200, response.content
        assert len(response.json()["results"]) == 1

    def test_needs_view_permission(self, client_for: Any) -> None:
        assert client_for("noperm").get(START).status_code == 403
        assert client_for("view").get(START).status_code == 200


SCHEMA_MEDIA_TYPE = "application/vnd.oai.openapi+json"


@pytest.mark.parametrize(
    ("accept", "media_type"),
    [
        (None, SCHEMA_MEDIA_TYPE),
        ("*/*", SCHEMA_MEDIA_TYPE),
        (SCHEMA_MEDIA_TYPE, SCHEMA_MEDIA_TYPE),
        ("application/json", "application/json"),
        ("text/html;q=0.9, application/json", "application/json"),
    ],
)
def test_the_schema_answers_application_json_too(
    api: Client, accept: str | None, media_type: str
) -> None:
    """Tools often ask for ``Accept: application/json``: the schema used to answer ``406``
    to it (it served only ``application/vnd.oai.openapi+json``, still the default). It
    answers the same document as ``application/json`` now."""
    url = reverse("yieldstar:schema")
    default = api.get(url)
    assert default.status_code == 200
    response = api.get(url, headers={"Accept": accept} if accept else {})
    assert response.status_code == 200, response.content
    assert response["Content-Type"].split(";")[0] == media_type
    assert json.loads(response.content) == json.loads(default.content)
    assert json.loads(response.content)["openapi"].startswith("3.")


def test_the_schema_still_refuses_what_it_cannot_answer(api: Client) -> None:
    response = api.get(reverse("yieldstar:schema"), headers={"Accept": "text/html"})
    assert response.status_code == 406
    assert response["Content-Type"] == "application/json"
    assert response.json()["code"] == "not_acceptable"
