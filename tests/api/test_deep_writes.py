"""Writes whose changed paths are many and deep: the worst shapes a body the API admits
can take finish in seconds, store what was sent, and lose no wake.

The wall-clock bound is only a hang guard: each of these took from 15 s to 2 minutes of
CPU (and gigabytes of memory) when every prefix of every changed path was encoded.
"""

from __future__ import annotations

import base64
import gc
import json
import time
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.test import Client, RequestFactory, override_settings
from django.urls import reverse

from yieldstar_django.api.parsers import BODY_NODE_SLACK
from yieldstar_django.api.views import not_null, replacement
from yieldstar_django.connector import get_store_client
from yieldstar_django.core.commits import CommitOutcome, StoreMutation
from yieldstar_django.core.definition import StoreDefinition, define_store, unregister_store
from yieldstar_django.core.memory import MemoryStoreClient
from yieldstar_django.core.results import StoreWaiter
from yieldstar_django.models import Waiter

pytestmark = pytest.mark.django_db

#: Seconds any one request may take before the test calls it a hang.
HANG = 60.0


@pytest.fixture
def anything() -> Iterator[StoreDefinition]:
    definition = define_store("api-anything", None, initial=lambda id: {})
    yield definition
    unregister_store(definition.name)


def chain(depth: int, inner: str) -> str:
    """``inner`` wrapped in ``depth`` single-element lists, as JSON text."""
    return "[" * depth + inner + "]" * depth


def put(api: Client, id: str, body: str) -> Any:
    started = time.monotonic()
    response = api.put(
        reverse("yieldstar:store-detail", args=["api-anything", id]),
        body,
        content_type="application/json",
    )
    elapsed = time.monotonic() - started
    assert elapsed < HANG, f"a PUT of {len(body):,} bytes took {elapsed:.0f} s"
    return response


def state_of(api: Client, id: str) -> Any:
    response = api.get(reverse("yieldstar:store-detail", args=["api-anything", id]))
    assert response.status_code == 200
    return response.json()["state"]


def wait_deep(definition: StoreDefinition, id: str, depth: int) -> None:
    """Register a waiter whose selector reads the last leaf at the bottom of the chain."""

    def selector(state: Any) -> Any:
        node = state
        for _ in range(depth - 1):
            node = node[0]
        return node[-1] or None

    client = get_store_client()
    result = client.take_from_store(definition, id, selector=selector, claim=None)
    assert result.matched is False
    client.register_waiter(
        StoreWaiter(
            workflow_id="wf",
            execution_id="deep-reader",
            step_key="take-0",
            store_name=definition.name,
            store_id=id,
            instance_id=result.instance_id,
            since_version=result.version,
            read_paths=result.read_paths,
        )
    )


def test_ten_thousand_leaves_250_deep_twice(api: Client, anything: StoreDefinition) -> None:
    """The 20 KB body of the review: a chain of 249 lists over 10,000 leaves, sent twice
    (the second changes every leaf), wakes the reader of the last leaf (the commit marks
    the waiter it wakes; the test's transaction never commits, so nothing is sent)."""
    zeros = chain(249, ",".join(["0"] * 10_000))
    ones = chain(249, ",".join(["1"] * 10_000))
    assert len(zeros) < 21_000
    assert put(api, "deep", zeros).status_code == 200
    wait_deep(anything, "deep", 249)
    assert put(api, "deep", ones).status_code == 200
    assert state_of(api, "deep") == json.loads(ones)
    assert Waiter.objects.get(execution_id="deep-reader").woken_at is not None  # woken


def test_the_largest_body_of_nested_empty_lists_is_refused_unread(
    api: Client, anything: StoreDefinition
) -> None:
    """7.9 MB of chains 250 lists deep (four million values: under the byte limit, over
    ``MAX_STATE_NODES``) is ``413`` before it is decoded, and nothing is stored."""
    deep = "[" + ",".join([chain(250, "")] * 15_800) + "]"
    assert 7_800_000 < len(deep) < 8_000_000
    response = put(api, "nested", deep)
    assert response.status_code == 413, response.content[:300]
    assert response.json()["code"] == "request_too_large"
    assert "3950001 JSON values" in response.json()["detail"]
    missing = api.get(reverse("yieldstar:store-detail", args=["api-anything", "nested"]))
    assert missing.status_code == 404


def test_the_value_limit_of_a_body(api: Client, anything: StoreDefinition) -> None:
    """With ``MAX_STATE_NODES`` 1,000: a body of 1,000 values is stored; a body of more
    than the limit and a patch document's slack is ``413`` before it is decoded (as a
    ``PUT`` or a merge patch), one within the slack ``400`` ``not_durable``, as is a state
    grown past the limit by a smaller patch; none changes the store."""
    url = reverse("yieldstar:store-detail", args=["api-anything", "limited"])
    at_limit = json.dumps({"v": [[]] * 998})
    one_over = json.dumps({"v": [[]] * 999})
    far_over = json.dumps({"v": [[]] * (999 + BODY_NODE_SLACK)})
    merge = "application/merge-patch+json"
    with override_settings(YIELDSTAR={"MAX_STATE_NODES": 1000}):
        assert put(api, "limited", at_limit).status_code == 200
        patched = api.patch(url, far_over, content_type=merge)
        for refused in (put(api, "limited", far_over), patched):
            assert refused.status_code == 413, refused.content[:300]
            assert refused.json()["code"] == "request_too_large"
        for refused in (
            put(api, "limited", one_over),
            api.patch(url, json.dumps({"w": [0] * 10}), content_type=merge),
        ):
            assert refused.status_code == 400, refused.content[:300]
            assert refused.json()["code"] == "not_durable"
            assert "more than the limit of 1000 values" in refused.json()["detail"]
    assert state_of(api, "limited") == json.loads(at_limit)


def test_a_few_megabytes_of_ordinary_records_are_stored(
    api: Client, anything: StoreDefinition
) -> None:
    """About 4 MB of records (some 400,000 values) fit the default limits."""
    records = [
        {"id": i, "name": f"customer {i}", "email": f"c{i}@example.com", "tags": ["a", "b"]}
        for i in range(50_000)
    ]
    body = json.dumps(records)
    assert len(body) > 4_000_000
    response = put(api, "records", body)
    assert response.status_code == 200, response.content[:300]
    assert response.json()["state"][-1] == records[-1]


class _Behind(MemoryStoreClient):
    """Records how many members ``body`` holds at each commit; the first commit loses to a
    write made behind it, so the write tries again."""

    def __init__(self, body: dict[str, Any]) -> None:
        super().__init__()
        self.body = body
        self.seen: list[int] = []
        self.behind = False

    def commit_mutation(self, mutation: StoreMutation) -> CommitOutcome:
        if not self.behind:
            self.seen.append(len(self.body))
            if len(self.seen) == 1:
                self.behind = True
                self.update_store(mutation.definition, mutation.id, updater=lambda _: {"x": 1})
                self.behind = False
        return super().commit_mutation(mutation)


def test_a_put_commits_without_its_body_values_and_retries_from_their_text() -> None:
    """A ``PUT``'s body is emptied once its state is encoded, before the commit (which
    then holds the text, not the values beside it); a later attempt replaces the state
    with the same value, decoded from that text."""
    definition = StoreDefinition("tests.replaced", None, lambda id: {})
    body = {"items": [[i, {"n": i}] for i in range(100)], "name": "x"}
    expected = json.loads(json.dumps(body))
    client = _Behind(body)
    client.get_store(definition, "s")
    client.update_store(definition, "s", updater=not_null(replacement(None, definition, body)))
    assert client.seen == [0, 0]
    assert client.get_store(definition, "s").state == expected


def test_a_sent_response_goes_with_its_last_reference(
    api: Client, anything: StoreDefinition
) -> None:
    """Once the server has sent and closed a response, nothing holds it in a reference
    cycle (its view and its renderer context): a large state's text in it is freed at
    once, not when the cyclic collector runs, maybe during the next request."""
    environ = (
        RequestFactory()
        .generic(
            "PUT",
            reverse("yieldstar:store-detail", args=["api-anything", "freed"]),
            json.dumps({"items": list(range(1_000))}),
            content_type="application/json",
            HTTP_AUTHORIZATION="Basic " + base64.b64encode(b"change:pw").decode(),
        )
        .environ
    )
    request_started.disconnect(close_old_connections)  # as the test client does
    request_finished.disconnect(close_old_connections)
    gc.disable()
    try:
        response = WSGIHandler()(environ, lambda status, headers: None)
        assert response.status_code == 200, b"".join(response)
        b"".join(response)
        response.close()
        sent = weakref.ref(response)
        del response
        assert sent() is None
    finally:
        gc.enable()
        request_finished.connect(close_old_connections)
        request_started.connect(close_old_connections)
