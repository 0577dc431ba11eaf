"""Workflows of the traces and metrics tests."""

from __future__ import annotations

import threading
from typing import Any

from yieldstar_django import define_store, workflow

inbox = define_store("obs-inbox", None, initial=lambda id: {"items": []})


def first(state: Any) -> Any:
    return state["items"][0] if state["items"] else None


def double(x: int) -> int:
    return 2 * x


def broken() -> None:
    raise ValueError("broken on purpose")


@workflow("obs.take_then_run")
def take_then_run(step: Any, store_id: str) -> Any:
    """Waits for an item in ``obs-inbox/<store_id>``, then doubles it."""
    item = yield from step.take(inbox, store_id, selector=first)
    return (yield from step.run(double, item))


@workflow("obs.fails")
def fails(step: Any) -> Any:
    yield from step.run(broken)


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str() of this error fails")


def unprintable() -> None:
    raise Unprintable()


@workflow("obs.fails_unprintably")
def fails_unprintably(step: Any) -> Any:
    yield from step.run(unprintable)


@workflow("obs.steps")
def steps(step: Any, count: int) -> Any:
    """``count`` function steps (the bench's and the no-import check's workflow)."""
    total = 0
    for i in range(count):
        total += yield from step.run(double, i)
    return total


@workflow("obs.contended")
def contended(step: Any, store_id: str) -> Any:
    """An update whose first attempt loses its compare-and-swap to another client's commit."""
    result = yield from step.update(inbox, store_id, updater=racing(store_id))
    return result.state["items"]


RACED: set[str] = set()


def racing(store_id: str) -> Any:
    def updater(draft: Any) -> None:
        if store_id not in RACED:
            RACED.add(store_id)
            # From another thread (its own connection, none of this step's commit hook).
            thread = threading.Thread(target=_other_write, args=(store_id,))
            thread.start()
            thread.join()
        draft["items"].append("mine")

    return updater


def _other_write(store_id: str) -> None:
    from django.db import connections

    from yieldstar_django.connector import DatabaseStoreClient

    try:
        DatabaseStoreClient().update_store(
            inbox, store_id, updater=lambda d: d["items"].append("other")
        )
    finally:
        connections.close_all()
