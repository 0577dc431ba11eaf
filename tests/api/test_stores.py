"""Store endpoints: snapshots and ETags, conditional and idempotent writes, patches,
listing and pagination."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from tests.polling import HANG_SECONDS, join_or_fail
from yieldstar_django.connector import get_store_client
from yieldstar_django.core.definition import StoreDefinition
from yieldstar_django.models import AppliedStep, IdempotencyKey, StoreInstance, StoreVersion

pytestmark = pytest.mark.django_db

JSON = "application/json"
MERGE = "application/merge-patch+json"
PATCH = "application/json-patch+json"


def url(id: str = "s", name: str = "api-counter") -> str:
    return reverse("yieldstar:store-detail", args=[name, id])


def write(client: Client, method: str, body: Any, content_type: str = JSON, **headers: str) -> Any:
    call = getattr(client, method.lower())
    target = headers.pop("target", url())
    return call(target, json.dumps(body), content_type=content_type, headers=headers)


def create(id: str = "s", name: str = "api-counter") -> None:
    """Create the store from its initial state, as a workflow's first read does (a GET
    never creates one)."""
    from yieldstar_django.core.definition import get_definition

    definition = get_definition(name)
    assert definition is not None
    get_store_client().get_store(definition, id)


def etag_of(client: Client, target: str | None = None) -> str:
    if target is None:
        create()
    return str(client.get(target or url())["ETag"])


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_get_of_a_missing_store_is_404_and_writes_nothing(
    api: Client, counter: StoreDefinition, method: str
) -> None:
    response = getattr(api, method.lower())(url())
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    if method == "GET":
        assert response.json()["code"] == "store_not_found"
    assert not StoreInstance.objects.exists()
    assert not StoreVersion.objects.exists()


def test_first_write_creates_the_store(api: Client, counter: StoreDefinition) -> None:
    response = write(api, "PATCH", {"items": ["a"]}, MERGE)
    assert response.status_code == 200, response.content
    assert response.json()["state"] == {"count": 0, "items": ["a"]}  # from the initial state


def test_get_reads_the_initial_state_with_etag(api: Client, counter: StoreDefinition) -> None:
    create()
    response = api.get(url())
    assert response.status_code == 200
    body = response.json()
    assert body["state"] == {"count": 0, "items": []}
    assert body["version"] == 0
    assert response["ETag"] == f'"{body["instance_id"]}:0"'
    assert response["Content-Type"] == "application/json"


def test_if_none_match(api: Client, counter: StoreDefinition) -> None:
    etag = etag_of(api)
    response = api.get(url(), headers={"If-None-Match": etag})
    assert response.status_code == 304
    assert response["ETag"] == etag
    assert api.get(url(), headers={"If-None-Match": '"other:1"'}).status_code == 200


def test_if_none_match_compares_weakly(api: Client, counter: StoreDefinition) -> None:
    """RFC 9110 compares ``If-None-Match`` weakly: the ETag a compressing proxy weakened
    (``W/"..."``) still answers 304 while nothing changed."""
    etag = etag_of(api)
    for header in [f"W/{etag}", f'"other:1", W/{etag}']:
        response = api.get(url(), headers={"If-None-Match": header})
        assert response.status_code == 304, header
        assert response["ETag"] == etag
    write(api, "PUT", {"count": 1})
    assert api.get(url(), headers={"If-None-Match": f"W/{etag}"}).status_code == 200


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_a_read_evaluates_if_match(api: Client, counter: StoreDefinition, method: str) -> None:
    """RFC 9110 (13.1.1): a server evaluates ``If-Match`` on any method; a false one is
    ``412`` with the current ETag, evaluated before ``If-None-Match`` (13.2.2). A read with
    a stale ``If-Match`` used to answer ``200`` with the newer state."""
    read = getattr(api, method.lower())
    stale = etag_of(api)
    write(api, "PUT", {"count": 1})
    current = str(api.get(url())["ETag"])
    versions = StoreVersion.objects.count()
    for header in [stale, f"W/{current}", '"garbage"', f'"x:1", {stale}']:
        refused = read(url(), headers={"If-Match": header})
        assert refused.status_code == 412, (header, refused.status_code)
        assert refused["ETag"] == current
        assert refused["Content-Type"] == "application/json"
        if method == "GET":
            assert refused.json()["code"] == "precondition_failed"
            assert refused.json()["current_etag"] == current
    for header in [current, "*", f'"x:1", {current}']:
        allowed = read(url(), headers={"If-Match": header})
        assert allowed.status_code == 200, (header, allowed.status_code)
        assert allowed["ETag"] == current
        if method == "GET":
            assert allowed.json()["state"] == {"count": 1}
    # If-Match is evaluated first: false, it is 412 even where If-None-Match would be 304.
    both = {"If-Match": stale, "If-None-Match": current}
    assert read(url(), headers=both).status_code == 412
    both = {"If-Match": current, "If-None-Match": current}
    assert read(url(), headers=both).status_code == 304
    malformed = read(url(), headers={"If-Match": "not-quoted"})
    assert malformed.status_code == 400
    if method == "GET":
        assert malformed.json()["code"] == "invalid_header"
    assert StoreVersion.objects.count() == versions


@pytest.mark.parametrize("method", ["GET", "HEAD"])
@pytest.mark.parametrize("header", ["*", '"x:0"'])
def test_a_read_of_a_missing_store_with_if_match_is_412(
    api: Client, counter: StoreDefinition, method: str, header: str
) -> None:
    """A store that does not exist has no current representation, so no ``If-Match``
    (``*`` included) is true: ``412`` without an ``ETag``, as a write answers, and nothing
    is created. ``If-None-Match`` alone is true there, and the read the ``404`` it was."""
    read = getattr(api, method.lower())
    response = read(url(), headers={"If-Match": header})
    assert response.status_code == 412, response.status_code
    assert "ETag" not in response
    if method == "GET":
        assert response.json()["code"] == "precondition_failed"
        assert response.json()["current_etag"] is None
    assert read(url(), headers={"If-None-Match": "*"}).status_code == 404
    assert not StoreInstance.objects.exists()
    assert not StoreVersion.objects.exists()


def test_the_schema_documents_if_match_on_a_read(api: Client) -> None:
    operation = next(
        item["get"]
        for item in api.get(reverse("yieldstar:schema")).json()["paths"].values()
        if item.get("get", {}).get("operationId") == "store_retrieve"
    )
    assert "If-Match" in [parameter["name"] for parameter in operation["parameters"]]
    assert "412" in operation["responses"]


def test_unknown_name_is_404(api: Client) -> None:
    response = api.get(url(name="no-such-store"))
    assert response.status_code == 404
    assert response.json()["code"] == "unknown_store"
    assert api.get(reverse("yieldstar:store-ids", args=["no-such-store"])).status_code == 404


def test_put_replaces_and_returns_new_etag(api: Client, counter: StoreDefinition) -> None:
    response = write(api, "PUT", {"count": 2, "items": ["a"]})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["state"] == {"count": 2, "items": ["a"]}
    assert (body["previous_version"], body["version"], body["replayed"]) == (0, 1, False)
    assert response["ETag"] == etag_of(api)
    assert api.get(url()).json()["state"] == {"count": 2, "items": ["a"]}


def test_if_match_writes_on_the_named_version(api: Client, counter: StoreDefinition) -> None:
    etag = etag_of(api)
    response = write(api, "PUT", {"count": 1}, **{"If-Match": etag})
    assert response.status_code == 200
    stale = write(api, "PUT", {"count": 9}, **{"If-Match": etag})
    assert stale.status_code == 412
    current = etag_of(api)
    assert stale["ETag"] == current
    assert stale.json()["current_etag"] == current
    assert api.get(url()).json()["state"] == {"count": 1}
    for method, body, content_type in [
        ("PATCH", {"count": 9}, MERGE),
        ("PATCH", [{"op": "replace", "path": "/count", "value": 9}], PATCH),
    ]:
        response = write(api, method, body, content_type, **{"If-Match": etag})
        assert response.status_code == 412
    assert api.delete(url(), headers={"If-Match": etag}).status_code == 412
    assert api.get(url()).json()["state"] == {"count": 1}
    assert api.delete(url(), headers={"If-Match": current}).status_code == 204
    assert not StoreInstance.objects.filter(store_id="s").exists()


def test_if_match_forms(api: Client, counter: StoreDefinition) -> None:
    etag = etag_of(api)
    assert write(api, "PUT", {"count": 1}, **{"If-Match": "*"}).status_code == 200
    current = etag_of(api)
    listed = f'"x:1", {current}'
    assert write(api, "PUT", {"count": 2}, **{"If-Match": listed}).status_code == 200
    weak = "W/" + etag_of(api)
    assert write(api, "PUT", {"count": 3}, **{"If-Match": weak}).status_code == 412
    assert write(api, "PUT", {"count": 3}, **{"If-Match": '"garbage"'}).status_code == 412
    response = write(api, "PUT", {"count": 3}, **{"If-Match": "not-quoted"})
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_header"
    assert write(api, "PUT", {"count": 3}, **{"If-Match": etag}).status_code == 412
    assert api.get(url()).json()["state"] == {"count": 2}


@pytest.mark.parametrize("form", [", {etag}", '"x:1", , {etag}', '"x:1",,{etag},', " ,{etag}"])
def test_empty_list_elements_are_ignored(api: Client, counter: StoreDefinition, form: str) -> None:
    """RFC 9110 (5.6.1.2): a recipient of a list header must accept and ignore empty
    elements, in ``If-Match`` as in ``If-None-Match``."""
    etag = etag_of(api)
    response = write(api, "PUT", {"count": 1}, **{"If-Match": form.format(etag=etag)})
    assert response.status_code == 200, response.content
    current = response["ETag"]
    assert api.get(url(), headers={"If-None-Match": form.format(etag=current)}).status_code == 304
    for empty in ["", " , ,"]:
        refused = write(api, "PUT", {"count": 2}, **{"If-Match": empty})
        assert refused.status_code == 400, refused.content
        assert refused.json()["code"] == "invalid_header"
    assert api.get(url()).json()["state"] == {"count": 1}


def test_if_match_after_recreation_fails(api: Client, counter: StoreDefinition) -> None:
    etag = etag_of(api)
    assert api.delete(url()).status_code == 204
    create()  # a new instance at version 0
    response = write(api, "PUT", {"count": 5}, **{"If-Match": etag})
    assert response.status_code == 412
    assert response["ETag"] != etag


#: A write of each kind, as (method, body, content type): PUT, both PATCHes, DELETE.
WRITES = [
    pytest.param("PUT", {"count": 1}, JSON, id="PUT"),
    pytest.param("PATCH", {"count": 1}, MERGE, id="PATCH-merge"),
    pytest.param(
        "PATCH", [{"op": "replace", "path": "/count", "value": 1}], PATCH, id="PATCH-json"
    ),
    pytest.param("DELETE", None, None, id="DELETE"),
]


def send(
    client: Client, method: str, body: Any, content_type: str | None, target: str, **headers: str
) -> Any:
    """One of ``WRITES`` to ``target``."""
    if method == "DELETE":
        return client.delete(target, headers=headers)
    assert content_type is not None
    return write(client, method, body, content_type, target=target, **headers)


@pytest.mark.parametrize("if_match", ['"x:0"', '"x:0", "y:1"', "*"])
@pytest.mark.parametrize(("method", "body", "content_type"), WRITES)
def test_a_refused_conditional_write_creates_no_store(
    api: Client,
    counter: StoreDefinition,
    method: str,
    body: Any,
    content_type: str | None,
    if_match: str,
) -> None:
    """RFC 9110: ``If-Match`` (ETags or ``*``) is false for a resource that has no current
    representation. A conditional write to a missing store is ``412`` and creates nothing
    (the core's conditional writes insert a missing store before they compare)."""
    target = url("never-written")
    response = send(api, method, body, content_type, target, **{"If-Match": if_match})
    assert response.status_code == 412, response.content
    assert response.json()["code"] == "precondition_failed"
    assert response.json()["current_etag"] is None  # there is no current version
    assert "ETag" not in response
    assert not StoreInstance.objects.filter(store_id="never-written").exists()
    assert not StoreVersion.objects.filter(store_id="never-written").exists()
    assert api.get(target).status_code == 404


@pytest.mark.parametrize(("method", "body", "content_type"), WRITES)
def test_a_refused_write_to_a_missing_store_frees_its_key(
    api: Client, counter: StoreDefinition, method: str, body: Any, content_type: str | None
) -> None:
    """As every ``412``: nothing is recorded under the ``Idempotency-Key``, which stays free
    for a corrected request."""
    target = url("never-written")
    headers = {"Idempotency-Key": "k", "If-Match": '"x:0"'}
    assert send(api, method, body, content_type, target, **headers).status_code == 412
    assert not IdempotencyKey.objects.exists()
    assert not AppliedStep.objects.exists()
    assert not StoreInstance.objects.exists()
    corrected = send(api, method, body, content_type, target, **{"Idempotency-Key": "k"})
    assert corrected.status_code == (204 if method == "DELETE" else 200), corrected.content


def test_a_conditional_write_replays_after_its_store_is_gone(
    api: Client, counter: StoreDefinition
) -> None:
    """The ledger wins over a missing store: a retry of a conditional write that committed
    gets the recorded outcome, not ``412``, when the store was deleted since (by the retried
    delete itself, or by anyone)."""
    headers = {"Idempotency-Key": "k", "If-Match": etag_of(api)}
    first = write(api, "PUT", {"count": 1}, **headers)
    assert first.status_code == 200, first.content
    assert api.delete(url()).status_code == 204
    again = write(api, "PUT", {"count": 1}, **headers)
    assert again.status_code == 200, again.content
    assert again.json() == {**first.json(), "replayed": True}
    headers = {"Idempotency-Key": "d", "If-Match": etag_of(api)}
    assert api.delete(url(), headers=headers).status_code == 204
    assert api.delete(url(), headers=headers).status_code == 204  # replayed
    assert not StoreInstance.objects.filter(store_id="s").exists()


@pytest.mark.parametrize(("method", "body", "content_type"), WRITES)
def test_a_store_deleted_behind_the_client_stays_deleted(
    api: Client,
    counter: StoreDefinition,
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    body: Any,
    content_type: str | None,
) -> None:
    """Another process deletes the store after the API's client read it: the conditional
    write commits against a row that is gone, then finds the store missing; it is 412 and
    the store stays deleted (the core creates nothing for an If-Match)."""
    etag = etag_of(api)
    client = get_store_client()
    before = client.read_store(counter, "s")
    assert before is not None
    reads = [client.read_store, client.read_store_and_step]

    def read_then_deleted(*args: Any) -> Any:
        client.delete_store(counter, "s")  # the other process, between read and commit
        monkeypatch.setattr(client, "read_store", reads[0])
        monkeypatch.setattr(client, "read_store_and_step", reads[1])
        return before if len(args) == 2 else (None, before)

    monkeypatch.setattr(client, "read_store", read_then_deleted)
    monkeypatch.setattr(client, "read_store_and_step", read_then_deleted)
    response = send(api, method, body, content_type, url(), **{"If-Match": etag})
    assert response.status_code == 412, response.content
    assert response.json()["current_etag"] is None
    assert not StoreInstance.objects.filter(store_id="s").exists()


def test_require_if_match(api: Client, counter: StoreDefinition, settings: Any) -> None:
    settings.YIELDSTAR = {**settings.YIELDSTAR, "API_REQUIRE_IF_MATCH": True}
    response = write(api, "PUT", {"count": 1})
    assert response.status_code == 428
    assert response.json()["code"] == "precondition_required"
    assert write(api, "PATCH", {"count": 1}, MERGE).status_code == 428
    assert api.delete(url()).status_code == 428
    assert api.get(url()).status_code == 404  # nothing was written
    assert write(api, "PUT", {"count": 1}, **{"If-Match": etag_of(api)}).status_code == 200


CREATE_ONLY = {"If-None-Match": "*"}


def test_if_none_match_star_writes_only_a_missing_store(
    api: Client, counter: StoreDefinition
) -> None:
    """RFC 9110: a PUT with ``If-None-Match: *`` must not modify an existing store."""
    created = write(api, "PUT", {"count": 1}, **CREATE_ONLY)
    assert created.status_code == 200, created.content
    assert created.json()["version"] == 1
    etag = created["ETag"]
    for method, body, media in (("PUT", {"count": 2}, JSON), ("PATCH", {"count": 2}, MERGE)):
        refused = write(api, method, body, media, **CREATE_ONLY)
        assert refused.status_code == 412, refused.content
        assert refused.json()["current_etag"] == etag == refused["ETag"]
        assert "If-None-Match" in refused.json()["detail"]
    refused = api.delete(url(), headers=CREATE_ONLY)
    assert refused.status_code == 412
    assert api.get(url()).json()["state"] == {"count": 1}
    assert api.get(url())["ETag"] == etag

    patched = write(api, "PATCH", {"count": 5}, MERGE, target=url("p"), **CREATE_ONLY)
    assert patched.status_code == 200, patched.content
    assert patched.json()["state"]["count"] == 5
    assert api.delete(url("d"), headers=CREATE_ONLY).status_code == 204
    assert not StoreInstance.objects.filter(store_id="d").exists()


def test_if_none_match_on_a_write_is_star_alone(api: Client, counter: StoreDefinition) -> None:
    etag = etag_of(api)
    for headers in ({"If-None-Match": etag}, {"If-None-Match": "*", "If-Match": etag}):
        response = write(api, "PUT", {"count": 9}, **headers)
        assert response.status_code == 400, response.content
        assert response.json()["code"] == "invalid_header"
    assert api.get(url()).json()["state"] == {"count": 0, "items": []}


def test_if_none_match_star_satisfies_require_if_match(
    api: Client, counter: StoreDefinition, settings: Any
) -> None:
    settings.YIELDSTAR = {**settings.YIELDSTAR, "API_REQUIRE_IF_MATCH": True}
    assert write(api, "PUT", {"count": 1}, **CREATE_ONLY).status_code == 200
    assert write(api, "PUT", {"count": 2}, **CREATE_ONLY).status_code == 412
    assert api.get(url()).json()["state"] == {"count": 1}


def test_if_none_match_star_with_an_idempotency_key(api: Client, counter: StoreDefinition) -> None:
    """A retry under the key is replayed (not refused: the store exists now); the same key
    without the header is another request."""
    headers = {**CREATE_ONLY, "Idempotency-Key": "create-once"}
    first = write(api, "PUT", {"count": 1}, **headers)
    assert first.status_code == 200, first.content
    again = write(api, "PUT", {"count": 1}, **headers)
    assert again.status_code == 200, again.content
    assert again.json() == {**first.json(), "replayed": True}
    other = write(api, "PUT", {"count": 1}, **{"Idempotency-Key": "create-once"})
    assert other.status_code == 422
    assert api.get(url()).json()["version"] == 1


def test_merge_patch(api: Client, counter: StoreDefinition) -> None:
    write(api, "PUT", {"count": 1, "items": [1], "meta": {"a": 1, "b": 2}})
    response = write(api, "PATCH", {"meta": {"a": None, "c": 3}, "count": 2}, MERGE)
    assert response.status_code == 200, response.content
    assert response.json()["state"] == {"count": 2, "items": [1], "meta": {"b": 2, "c": 3}}
    version = StoreVersion.objects.get(store_id="s", version=2)
    assert sorted(json.loads(version.changed_paths)) == [["count"], ["meta", "a"], ["meta", "c"]]


def test_json_patch_with_test(api: Client, counter: StoreDefinition) -> None:
    write(api, "PUT", {"count": 1, "items": ["a"]})
    patch = [
        {"op": "test", "path": "/count", "value": 1},
        {"op": "add", "path": "/items/-", "value": "b"},
        {"op": "replace", "path": "/count", "value": 2},
    ]
    response = write(api, "PATCH", patch, PATCH)
    assert response.status_code == 200, response.content
    assert response.json()["state"] == {"count": 2, "items": ["a", "b"]}
    # The same patch again: its test fails against the new state; nothing changes.
    response = write(api, "PATCH", patch, PATCH)
    assert response.status_code == 409
    assert response.json()["code"] == "patch_test_failed"
    assert response.json()["operation"] == 0
    assert api.get(url()).json()["version"] == 2


def test_json_patch_applies_to_the_state_it_commits_over(
    api: Client, counter: StoreDefinition, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A patch that lost a race is applied again to the newer state (CAS-safe)."""
    write(api, "PUT", {"count": 0, "items": []})
    client = get_store_client()
    original = type(client).commit_mutation
    raced = []

    def racing(self: Any, mutation: Any) -> Any:
        if not raced:  # someone else commits between our read and our write
            raced.append(True)
            self.update_store(
                mutation.definition, mutation.id, updater=lambda d: d["items"].append("other")
            )
        return original(self, mutation)

    monkeypatch.setattr(type(client), "commit_mutation", racing)
    response = write(api, "PATCH", [{"op": "add", "path": "/items/-", "value": "mine"}], PATCH)
    assert response.status_code == 200, response.content
    assert response.json()["state"]["items"] == ["other", "mine"]
    assert response.json()["version"] == 3


def test_delete_without_condition(api: Client, counter: StoreDefinition) -> None:
    assert api.delete(url("never")).status_code == 204
    assert not StoreInstance.objects.filter(store_id="never").exists()
    create("x")
    assert api.delete(url("x")).status_code == 204
    assert not StoreInstance.objects.filter(store_id="x").exists()


class TestIdempotencyKey:
    def test_replay_returns_the_recorded_outcome(
        self, api: Client, counter: StoreDefinition
    ) -> None:
        patch = [{"op": "add", "path": "/items/-", "value": 1}]
        first = write(api, "PATCH", patch, PATCH, **{"Idempotency-Key": "k-1"})
        assert first.status_code == 200, first.content
        again = write(api, "PATCH", patch, PATCH, **{"Idempotency-Key": "k-1"})
        assert again.status_code == 200
        assert again.json() == {**first.json(), "replayed": True}
        assert again["ETag"] == first["ETag"]
        assert api.get(url()).json()["state"]["items"] == [1]  # applied once
        assert AppliedStep.objects.filter(step_key="idempotency:k-1").count() == 1

    def test_replay_after_later_changes(self, api: Client, counter: StoreDefinition) -> None:
        first = write(api, "PUT", {"count": 1}, **{"Idempotency-Key": "k"})
        write(api, "PUT", {"count": 2})
        again = write(api, "PUT", {"count": 1}, **{"Idempotency-Key": "k"})
        assert again.json()["version"] == first.json()["version"] == 1
        assert again.json()["replayed"] is True
        assert api.get(url()).json()["state"] == {"count": 2}

    def test_replay_wins_over_if_match(self, api: Client, counter: StoreDefinition) -> None:
        etag = etag_of(api)
        headers = {"Idempotency-Key": "k", "If-Match": etag}
        assert write(api, "PUT", {"count": 1}, **headers).status_code == 200
        again = write(api, "PUT", {"count": 1}, **headers)
        assert again.status_code == 200
        assert again.json()["replayed"] is True

    def test_same_key_different_body_is_422(self, api: Client, counter: StoreDefinition) -> None:
        assert write(api, "PUT", {"count": 1}, **{"Idempotency-Key": "k"}).status_code == 200
        for method, body, content_type, target in [
            ("PUT", {"count": 2}, JSON, url()),
            ("PATCH", {"count": 1}, MERGE, url()),
            ("PUT", {"count": 1}, JSON, url("other")),
        ]:
            response = write(
                api, method, body, content_type, target=target, **{"Idempotency-Key": "k"}
            )
            assert response.status_code == 422, response.content
            assert response.json()["code"] == "idempotency_key_reused"
        assert api.delete(url(), headers={"Idempotency-Key": "k"}).status_code == 422
        assert api.get(url()).json()["state"] == {"count": 1}

    def test_keys_are_per_user(self, client_for: Any, counter: StoreDefinition) -> None:
        from django.contrib.auth.models import User

        first = client_for("change")
        other = Client()
        other.force_login(User.objects.create_superuser("other", password="pw"))
        assert write(first, "PUT", {"count": 1}, **{"Idempotency-Key": "k"}).status_code == 200
        response = write(other, "PUT", {"count": 2}, **{"Idempotency-Key": "k"})
        assert response.status_code == 200
        assert response.json()["replayed"] is False

    def test_rejected_request_frees_the_key(self, api: Client, counter: StoreDefinition) -> None:
        bad = write(api, "PUT", {"count": -1}, **{"Idempotency-Key": "k"})
        assert bad.status_code == 400
        assert not IdempotencyKey.objects.exists()
        good = write(api, "PUT", {"count": 1}, **{"Idempotency-Key": "k"})
        assert good.status_code == 200
        stale = write(api, "PUT", {"count": 2}, **{"Idempotency-Key": "k2", "If-Match": '"x:1"'})
        assert stale.status_code == 412
        assert not IdempotencyKey.objects.filter(key="k2").exists()

    def test_delete_exactly_once(self, api: Client, counter: StoreDefinition) -> None:
        create()
        assert api.delete(url(), headers={"Idempotency-Key": "d"}).status_code == 204
        create()  # re-created
        assert api.delete(url(), headers={"Idempotency-Key": "d"}).status_code == 204
        assert StoreInstance.objects.filter(store_id="s").exists()  # not deleted twice

    def test_invalid_keys(self, api: Client, counter: StoreDefinition) -> None:
        for key in ["", " ", "x" * 201, "caf\u00e9"]:
            response = write(api, "PUT", {"count": 1}, **{"Idempotency-Key": key})
            assert response.status_code == 400, key
            assert response.json()["code"] == "invalid_header"
        assert api.get(url()).status_code == 404  # nothing was written


class TestListing:
    def test_definitions_with_counts(self, api: Client, counter: StoreDefinition) -> None:
        for id in ["a", "b", "c"]:
            create(id)
        response = api.get(reverse("yieldstar:store-list"))
        assert response.status_code == 200
        entry = next(d for d in response.json() if d["name"] == "api-counter")
        assert entry["instances"] == 3
        assert entry["url"].endswith(reverse("yieldstar:store-ids", args=["api-counter"]))

    def test_ids_in_code_point_order_across_pages(
        self, api: Client, counter: StoreDefinition
    ) -> None:
        ids = ["b", "a", "B", "\u00e9", "a b", "Z", "\U0001f600", "\uff21", "_", "10", "9"]
        client = get_store_client()
        for id in ids:
            client.get_store(counter, id)
        seen: list[str] = []
        next_url: str | None = reverse("yieldstar:store-ids", args=["api-counter"]) + "?limit=3"
        pages = 0
        while next_url:
            response = api.get(next_url)
            assert response.status_code == 200, response.content
            page = response.json()
            assert len(page["results"]) <= 3
            seen += page["results"]
            next_url = page["next"]
            pages += 1
        assert seen == sorted(ids)
        assert pages == 4

    @pytest.mark.parametrize("query", ["limit=0", "limit=1001", "limit=x", "cursor=%25%25%25"])
    def test_bad_page_parameters(self, api: Client, counter: StoreDefinition, query: str) -> None:
        response = api.get(reverse("yieldstar:store-ids", args=["api-counter"]) + "?" + query)
        assert response.status_code == 400
        assert response.json()["code"] == "parse_error"

    @pytest.mark.parametrize("limit", ["0001001", "0001000000", "000000002000"])
    def test_leading_zeros_do_not_lift_the_page_size_cap(
        self, api: Client, counter: StoreDefinition, limit: str
    ) -> None:
        """``?limit=`` is read as the number it spells: past ``MAX_PAGE_SIZE`` it is ``400``,
        whatever zeros lead it, and no page is ever longer than the cap."""
        from django.utils import timezone

        from yieldstar_django.api.base import MAX_PAGE_SIZE

        now = timezone.now()
        StoreInstance.objects.bulk_create(
            StoreInstance(
                name="api-counter",
                store_id=f"z{n:05}",
                instance_id=f"i{n}",
                version=0,
                state='{"count":0}',
                created_at=now,
                updated_at=now,
            )
            for n in range(MAX_PAGE_SIZE + 1)
        )
        ids = reverse("yieldstar:store-ids", args=["api-counter"])
        response = api.get(ids, {"limit": limit})
        assert response.status_code == 400, len(response.json().get("results", []))
        assert response.json()["code"] == "parse_error"
        assert len(api.get(ids, {"limit": "0001000"}).json()["results"]) == MAX_PAGE_SIZE


def test_ids_may_hold_slashes(api: Client, counter: StoreDefinition) -> None:
    response = write(api, "PUT", {"count": 1}, target=url("tenant/7"))
    assert response.status_code == 200, response.content
    assert api.get("/yieldstar/stores/api-counter/tenant/7/").json()["id"] == "tenant/7"
    assert api.get("/yieldstar/stores/api-counter/tenant%2F7/").json()["version"] == 1


def test_ids_may_hold_line_breaks(api: Client, counter: StoreDefinition) -> None:
    create("a\nb")
    assert api.get("/yieldstar/stores/api-counter/a%0Ab/").json()["id"] == "a\nb"


def test_contention_is_409(
    api: Client, counter: StoreDefinition, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """A writer that loses every race gives up after CAS_MAX_ATTEMPTS; nothing of it lands."""
    settings.YIELDSTAR = {**settings.YIELDSTAR, "CAS_MAX_ATTEMPTS": 3}
    client = get_store_client()
    original = type(client).commit_mutation
    beating = []

    def always_beaten(self: Any, mutation: Any) -> Any:
        if mutation.step_id is not None and not beating:  # our write, not the rival's
            beating.append(True)
            try:
                self.update_store(
                    mutation.definition,
                    mutation.id,
                    updater=lambda d: d.update(count=d["count"] + 1),
                )
            finally:
                beating.clear()
        return original(self, mutation)

    monkeypatch.setattr(type(client), "commit_mutation", always_beaten)
    response = write(api, "PATCH", {"items": ["mine"]}, MERGE, **{"Idempotency-Key": "busy"})
    assert response.status_code == 409
    assert response.json()["code"] == "contention"
    monkeypatch.undo()
    state = api.get(url()).json()["state"]
    assert state == {"count": 3, "items": []}
    assert not IdempotencyKey.objects.filter(key="busy").exists()


@pytest.mark.django_db(transaction=True)
def test_concurrent_retries_apply_once(counter: StoreDefinition, django_user_model: Any) -> None:
    """The same idempotent request sent from several threads at once commits once."""
    import threading

    from django.db import connections

    django_user_model.objects.create_superuser("racer", password="pw")
    get_store_client().get_store(counter, "race")
    barrier = threading.Barrier(4, timeout=HANG_SECONDS)
    statuses: list[int] = []

    def send() -> None:
        try:
            client = Client()
            client.login(username="racer", password="pw")
            barrier.wait()
            response = write(
                client,
                "PATCH",
                [{"op": "add", "path": "/items/-", "value": "once"}],
                PATCH,
                target=url("race"),
                **{"Idempotency-Key": "same"},
            )
            statuses.append(response.status_code)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=send) for _ in range(4)]
    for thread in threads:
        thread.start()
    join_or_fail(*threads, what="the threads")
    assert statuses == [200] * 4
    snapshot = get_store_client().get_store(counter, "race")
    assert snapshot.state["items"] == ["once"]
    assert snapshot.version == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_patches_all_apply_and_a_stale_if_match_changes_nothing(
    counter: StoreDefinition, django_user_model: Any
) -> None:
    """PATCHes without If-Match racing from several threads (each its own database
    connection) all land: the core's loop recomputes each patch over the state it commits
    over. A PATCH with an If-Match that was current before the race gets 412 with the
    current ETag and changes nothing."""
    import threading

    from django.db import connections

    django_user_model.objects.create_superuser("patcher", password="pw")
    before = get_store_client().get_store(counter, "many")
    stale = f'"{before.instance_id}:{before.version}"'
    writers = 6
    barrier = threading.Barrier(writers + 1, timeout=HANG_SECONDS)
    results: dict[str, Any] = {}
    lock = threading.Lock()

    def send(label: str, body: Any, content_type: str, **headers: str) -> None:
        try:
            client = Client()
            client.login(username="patcher", password="pw")
            barrier.wait()
            response = write(client, "PATCH", body, content_type, target=url("many"), **headers)
            with lock:
                results[label] = response
        finally:
            connections.close_all()

    threads = [
        threading.Thread(
            target=send,
            args=(f"w{i}", [{"op": "add", "path": "/items/-", "value": f"w{i}"}], PATCH),
        )
        for i in range(writers)
    ]
    threads.append(
        threading.Thread(
            target=send, args=("stale", {"count": 99}, MERGE), kwargs={"If-Match": stale}
        )
    )
    # The stale writer must lose: commit one write before the race starts.
    get_store_client().update_store(counter, "many", updater=lambda d: d["items"].append("first"))
    for thread in threads:
        thread.start()
    join_or_fail(*threads, what="the threads")
    assert {label: r.status_code for label, r in results.items() if label != "stale"} == {
        f"w{i}": 200 for i in range(writers)
    }
    after = get_store_client().get_store(counter, "many")
    assert sorted(after.state["items"]) == sorted(["first", *(f"w{i}" for i in range(writers))])
    assert after.version == before.version + 1 + writers
    assert after.state["count"] == 0, "the stale write changed nothing"
    stale_response = results["stale"]
    assert stale_response.status_code == 412
    assert stale_response.json()["code"] == "precondition_failed"
    etag = stale_response["ETag"]
    assert etag.startswith(f'"{after.instance_id}:')
    assert etag != stale


def test_a_database_that_cannot_answer_is_503_not_500(
    api: Client, counter: StoreDefinition, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ``OperationalError`` (SQLite's "database is locked" past its timeout, a lost
    connection) is a JSON 503 with ``Retry-After``, for a read and a write."""
    from django.db import OperationalError

    create()
    client = get_store_client()

    def locked(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("database is locked")

    for method in ("read_store", "read_store_and_step"):
        monkeypatch.setattr(client, method, locked)
    monkeypatch.setattr(client.snapshots, "get", lambda *args: None)
    for response in (api.get(url()), write(api, "PUT", {"count": 1})):
        assert response.status_code == 503, response.content
        assert response.json()["code"] == "database_unavailable"
        assert response["Retry-After"] == "1"
    monkeypatch.undo()
    assert api.get(url()).json()["state"] == {"count": 0, "items": []}


@pytest.fixture
def anything() -> Any:
    from yieldstar_django.core.definition import define_store, unregister_store

    definition = define_store("api-anything", None, initial=lambda id: {})
    yield definition
    unregister_store(definition.name)


#: A state whose rendering has every case a JSON encoder may write its own way: keys out
#: of order, characters outside ASCII, the two line separators JSON allows and JavaScript
#: does not, escapes, floats (large, negative zero, inexact), long integers, nesting.
AWKWARD_STATE = {
    "z": [1e20, -0.0, 0.1, 1.5e-7, 2**70, -(10**30), True, False, None],
    "a": {"é": "naïve ☃ 😀", "sep": "line\u2028para\u2029end", "esc": '"\\\n\t\x01/'},
    "m": [[[{"b": [], "a": {}}]]],
}


@pytest.mark.parametrize("accept", [JSON, f"{JSON}; indent=2"])
def test_a_write_answers_its_state_as_a_read_renders_it(
    api: Client, anything: StoreDefinition, accept: str
) -> None:
    """The state a ``PUT`` or ``PATCH`` answers with is, byte for byte, what DRF's renderer
    makes of the state a read returns (whatever the media type's ``indent``)."""
    from rest_framework.renderers import JSONRenderer

    target = url("awkward", "api-anything")
    for method, body, content_type in (
        ("PUT", AWKWARD_STATE, JSON),
        ("PATCH", {"n": {"ü": "\u2029"}}, MERGE),
    ):
        response = write(api, method, body, content_type, target=target, Accept=accept)
        assert response.status_code == 200, response.content
        read = api.get(target).json()
        expected = {
            "name": "api-anything",
            "id": "awkward",
            "instance_id": read["instance_id"],
            "previous_version": read["version"] - 1,
            "version": read["version"],
            "state": read["state"],
            "replayed": False,
        }
        assert response.content == JSONRenderer().render(expected, accept)
    assert read["state"] == {**AWKWARD_STATE, "n": {"ü": "\u2029"}}
