"""Writes whose changed paths are many and deep: the worst shapes a body the API admits
can take finish in seconds, store what was sent, and lose no wake.

The wall-clock bound is only a hang guard: each of these took from 15 s to 2 minutes of
CPU (and gigabytes of memory) when every prefix of every changed path was encoded.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from yieldstar_django.connector import get_store_client
from yieldstar_django.core.definition import StoreDefinition, define_store, unregister_store
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


@pytest.mark.slow
def test_the_largest_body_of_nested_empty_lists(api: Client, anything: StoreDefinition) -> None:
    """7.9 MB of chains 250 lists deep, then the same with chains one level shallower:
    every chain changes at its bottom."""
    deep = "[" + ",".join([chain(250, "")] * 15_800) + "]"
    shallower = "[" + ",".join([chain(249, "")] * 15_800) + "]"
    assert 7_800_000 < len(deep) < 8_000_000
    assert put(api, "nested", deep).status_code == 200
    response = put(api, "nested", shallower)
    assert response.status_code == 200, response.content[:300]
    state = state_of(api, "nested")
    assert len(state) == 15_800 and state[0] == json.loads(chain(249, ""))
