"""User code must be synchronous: async callables are refused before anything commits."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest


async def _async_fn(*args: Any) -> None:
    return None


def _returns_coroutine(*args: Any) -> Any:
    return _async_fn()


def _returns_future(*args: Any) -> Any:
    loop = asyncio.new_event_loop()
    try:
        return loop.create_future()
    finally:
        loop.close()


@pytest.mark.parametrize("fn", [_async_fn, _returns_coroutine, _returns_future])
def test_async_updater_is_refused(harness: Any, define: Any, fn: Any) -> None:
    d = define()
    with pytest.raises(TypeError, match="synchronous"):
        harness.client.update_store(d, "a", updater=fn)
    assert harness.client.list_stores(d) == []
    snap = harness.client.get_store(d, "a")
    with pytest.raises(TypeError, match="synchronous"):
        harness.client.update_store_from(d, "a", snapshot=snap, updater=fn)
    assert harness.client.get_store(d, "a") == snap


@pytest.mark.parametrize("fn", [_async_fn, _returns_coroutine])
def test_async_selector_and_claim_are_refused(harness: Any, define: Any, fn: Any) -> None:
    d = define(initial=lambda id: {"jobs": [1]})
    c = harness.client
    with pytest.raises(TypeError, match="synchronous"):
        c.take_from_store(d, "q", selector=fn, claim=None)
    assert c.list_stores(d) == []
    with pytest.raises(TypeError, match="synchronous"):
        c.take_from_store(d, "q", selector=lambda s: s["jobs"][0], claim=fn)
    assert c.get_store(d, "q").version == 0


def test_async_initial_is_refused(harness: Any, define: Any) -> None:
    d = define(initial=_returns_coroutine)
    with pytest.raises(TypeError, match="synchronous"):
        harness.client.get_store(d, "a")
    assert harness.client.list_stores(d) == []
