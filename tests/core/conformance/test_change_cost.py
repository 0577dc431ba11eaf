"""The cost of a commit's changed paths and wake lookup grows with the size of the change,
not with its depth: N leaves changed at depth D cost within a small factor of N leaves
changed at depth 2, counted in the JSON text encoded and the bytes hashed (path keys, the
version row's paths, the states) and in the peak of memory allocated, on every client.

No timing: the counts are deterministic, and tracemalloc's peak nearly so.
"""

from __future__ import annotations

import hashlib
import json
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from yieldstar_django.core.waiter_index import path_match

from .test_waiters import wait_on

#: Leaves changed, and the depth of the deep shape (the API admits 258).
N, DEEP = 2_000, 200
#: How much more the deep shape may cost than the flat one.
FACTOR = 3


def shape(depth: int, leaf: int) -> dict[str, Any]:
    """``{"v": ...}`` with ``N`` leaves worth ``leaf`` at ``depth`` (``{"v": [leaves]}``
    for 2): a chain of single-element lists above one list of leaves."""
    value: Any = [leaf] * N
    for _ in range(depth - 2):
        value = [value]
    return {"v": value}


def leaves_of(draft: Any, depth: int) -> Any:
    node = draft["v"]
    for _ in range(depth - 2):
        node = node[0]
    return node


def replace(depth: int) -> Callable[[Any], Any]:
    """An updater returning a replacement (the structural diff)."""
    return lambda draft: shape(depth, 1)


def write_leaves(depth: int) -> Callable[[Any], Any]:
    """An updater writing each leaf through the draft (the recorded writes)."""

    def updater(draft: Any) -> None:
        leaves = leaves_of(draft, depth)
        for index in range(N):
            leaves[index] = 2

    return updater


class _CountingHash:
    def __init__(self, counter: list[int], inner: Any) -> None:
        self._counter, self._inner = counter, inner

    def update(self, data: bytes) -> None:
        self._counter[0] += len(data)
        self._inner.update(data)

    def copy(self) -> _CountingHash:
        return _CountingHash(self._counter, self._inner.copy())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture
def encoded(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """``[n]``: the characters ``json.dumps`` produced and the bytes SHA-256 hashed since
    the test started (path keys are JSON text, hashed past 200 characters)."""
    counter = [0]
    dumps, sha256 = json.dumps, hashlib.sha256

    def counting_dumps(*args: Any, **kwargs: Any) -> str:
        text = dumps(*args, **kwargs)
        counter[0] += len(text)
        return text

    def counting_sha256(data: bytes = b"", **kwargs: Any) -> _CountingHash:
        counter[0] += len(data)
        return _CountingHash(counter, sha256(data, **kwargs))

    monkeypatch.setattr(json, "dumps", counting_dumps)
    monkeypatch.setattr(hashlib, "sha256", counting_sha256)
    yield counter


def cost(harness: Any, define: Any, depth: int, updater_for: Any, counter: list[int]) -> int:
    """What one commit of ``updater_for(depth)`` encodes, on a store at ``shape(depth, 0)``
    that a waiter reads deep inside (so the commit looks waiters up), with the index keys
    of its changed paths (which the memory client does not look up by)."""
    d = define(initial=lambda id: shape(depth, 0))
    wait_on(harness, d, "s", lambda s: leaves_of(s, depth)[N - 1] or None)
    before = counter[0]
    harness.client.update_store(d, "s", updater=updater_for(depth))
    path_match(harness.changed_paths(d, "s")[-1])
    spent = counter[0] - before
    assert [w.execution_id for w in harness.wakes] == ["exec"]  # no wake lost
    return spent


@pytest.mark.parametrize("updater_for", [replace, write_leaves], ids=["diffed", "drafted"])
def test_a_deep_change_encodes_about_what_a_flat_one_does(
    harness: Any, define: Any, encoded: list[int], updater_for: Any
) -> None:
    flat = cost(harness, define, 2, updater_for, encoded)
    harness.wakes.clear()
    deep = cost(harness, define, DEEP, updater_for, encoded)
    assert deep <= FACTOR * flat, (deep, flat)


def peak(harness: Any, define: Any, depth: int, updater_for: Any) -> int:
    d = define(initial=lambda id: shape(depth, 0))
    wait_on(harness, d, "s", lambda s: leaves_of(s, depth)[N - 1] or None)
    tracemalloc.start()
    try:
        harness.client.update_store(d, "s", updater=updater_for(depth))
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("updater_for", [replace, write_leaves], ids=["diffed", "drafted"])
def test_a_deep_change_takes_about_the_memory_of_a_flat_one(
    harness: Any, define: Any, updater_for: Any
) -> None:
    flat = peak(harness, define, 2, updater_for)
    deep = peak(harness, define, DEEP, updater_for)
    assert deep <= FACTOR * flat, (deep, flat)
