"""Writes that start from the row the client remembers (``core/snapshots.py``).

Each test plants an old row in the client's cache, as another process's commit would leave
it, and checks that every result is the one a start from the current row gives: the commit
loses and retries, and what a speculative start would report without committing (a refused
condition, no match, an error of the updater) is confirmed from a fresh read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from yieldstar_django.core.commits import StoredState
from yieldstar_django.core.definition import StoreDefinition
from yieldstar_django.core.results import StoreDeleted, StoreSnapshot, StoreUpdated


def _row(client: Any, d: StoreDefinition, id: str) -> StoredState:
    row = client.snapshots.get(d.name, id)
    assert row is not None, "the client remembers what it read"
    return row


def _plant(client: Any, d: StoreDefinition, id: str, row: StoredState) -> None:
    client.snapshots.forget(d.name, id)
    client.snapshots.put(d.name, id, row)
    assert client.snapshots.get(d.name, id) == row


def _behind(
    harness: Any, define: Any, change: Callable[[Any], None]
) -> tuple[Any, StoreDefinition, StoredState, StoreSnapshot, StoreSnapshot]:
    """A store "a" that ``change`` updated after the client read it, the client made to
    remember it as it was before; with that old row and the snapshots before and after."""
    d = define()
    c = harness.client
    before = c.get_store(d, "a")
    old = _row(c, d, "a")
    c.update_store(d, "a", updater=change)
    after = c.get_store(d, "a")
    _plant(c, d, "a", old)
    return c, d, old, before, after


def test_an_update_from_an_old_row_applies_to_the_current_state(harness: Any, define: Any) -> None:
    c, d, *_ = _behind(harness, define, lambda s: s["items"].append("first"))
    result = c.update_store(d, "a", updater=lambda s: s["items"].append("second"))
    assert result == StoreUpdated(
        {"items": ["first", "second"], "count": 0}, previous_version=1, version=2
    )
    assert c.get_store(d, "a").state == {"items": ["first", "second"], "count": 0}
    assert _row(c, d, "a").version == 2


def test_a_condition_the_old_row_refuses_is_checked_on_the_current_one(
    harness: Any, define: Any
) -> None:
    c, d, old, _, current = _behind(harness, define, lambda s: s.update(count=1))
    result = c.update_store_from(d, "a", snapshot=current, updater=lambda s: s.update(count=2))
    assert result == StoreUpdated({"items": [], "count": 2}, previous_version=1, version=2)

    _plant(c, d, "a", old)
    assert c.delete_store_from(d, "a", snapshot=c.get_store(d, "a")) == StoreDeleted()


def test_a_condition_the_old_row_accepts_still_loses_to_the_current_one(
    harness: Any, define: Any
) -> None:
    c, d, old, first, _ = _behind(harness, define, lambda s: s.update(count=1))
    result = c.update_store_from(d, "a", snapshot=first, updater=lambda s: s.update(count=9))
    assert not result.updated
    _plant(c, d, "a", old)
    assert not c.delete_store_from(d, "a", snapshot=first).deleted
    assert c.get_store(d, "a").state == {"items": [], "count": 1}


def test_no_match_on_the_old_row_is_checked_on_the_current_one(harness: Any, define: Any) -> None:
    c, d, *_ = _behind(harness, define, lambda s: s["items"].append("job"))
    taken = c.take_from_store(
        d,
        "a",
        selector=lambda s: s["items"][0] if s["items"] else None,
        claim=lambda s, _: s["items"].pop(0),
    )
    assert taken.matched and taken.selected == "job"
    assert c.get_store(d, "a").state == {"items": [], "count": 0}


def test_an_updater_that_fails_on_the_old_row_runs_on_the_current_one(
    harness: Any, define: Any
) -> None:
    c, d, *_ = _behind(harness, define, lambda s: s.update(flag=True))
    calls: list[bool] = []

    def needs_flag(s: Any) -> None:
        calls.append(s.get("flag", False))
        s["count"] = 1 if s["flag"] else 0

    result = c.update_store(d, "a", updater=needs_flag)
    assert result.state == {"items": [], "count": 1, "flag": True}
    assert calls == [False, True], "tried on the remembered row, then on the current one"


def test_the_old_row_of_a_deleted_store_starts_a_new_instance(harness: Any, define: Any) -> None:
    d = define()
    c = harness.client
    c.update_store(d, "a", updater=lambda s: s.update(count=5))
    old = _row(c, d, "a")
    c.delete_store(d, "a")
    _plant(c, d, "a", old)
    result = c.update_store(d, "a", updater=lambda s: s["items"].append("x"))
    assert result == StoreUpdated({"items": ["x"], "count": 0}, previous_version=0, version=1)
    assert c.get_store(d, "a").instance_id != old.instance_id


def test_the_old_row_of_a_recreated_store_loses_to_the_new_instance(
    harness: Any, define: Any
) -> None:
    d = define()
    c = harness.client
    c.update_store(d, "a", updater=lambda s: s.update(count=5))
    old = _row(c, d, "a")
    snap = c.get_store(d, "a")
    assert c.delete_store_from(d, "a", snapshot=snap).deleted
    c.update_store(d, "a", updater=lambda s: s.update(count=1))
    _plant(c, d, "a", old)
    result = c.update_store(d, "a", updater=lambda s: s.update(count=s["count"] + 10))
    assert result.state["count"] == 11
    assert c.get_store(d, "a").instance_id != old.instance_id


def test_a_write_with_a_step_id_reads_the_ledger_first(harness: Any, define: Any) -> None:
    """A replayed step returns its recorded result without running user code, even when
    the client remembers the store."""
    from yieldstar_django.core.results import StoreStepId

    d = define()
    c = harness.client
    step = StoreStepId("exec", "step")
    first = c.update_store(d, "a", updater=lambda s: s.update(count=1), step_id=step)
    assert c.snapshots.get(d.name, "a") is not None
    calls: list[int] = []
    replay = c.update_store(d, "a", updater=lambda s: calls.append(1), step_id=step)
    assert replay == first and calls == []
