"""``update_store_from`` and ``delete_store_from``: snapshot comparisons.

See docs/internals/architecture.md#stores.
"""

from __future__ import annotations

from typing import Any

import pytest

from yieldstar_django import StoreSnapshot
from yieldstar_django.core.commits import VersionCondition
from yieldstar_django.core.definition import StoreDefinition
from yieldstar_django.core.results import (
    StoreDeleteConflict,
    StoreDeleted,
    StoreUpdateConflict,
    StoreUpdated,
)

from .conftest import DefineStore

#: A store definition and the client to use it with.
Store = tuple[StoreDefinition, Any]


@pytest.fixture
def store(harness: Any, define: DefineStore) -> Store:
    """A new store definition with the default initial state, and the harness's client."""
    return define(), harness.client


def test_update_from_current_snapshot(store: Store) -> None:
    d, c = store
    snap = c.get_store(d, "a")
    result = c.update_store_from(d, "a", snapshot=snap, updater=lambda s: s.update(count=1))
    assert result == StoreUpdated({"items": [], "count": 1}, previous_version=0, version=1)
    assert result.updated is True


def test_update_from_stale_snapshot_is_a_conflict_that_changes_nothing(store: Store) -> None:
    d, c = store
    stale = c.get_store(d, "a")
    c.update_store(d, "a", updater=lambda s: s.update(count=7))
    calls: list[int] = []
    result = c.update_store_from(
        d, "a", snapshot=stale, updater=lambda s: calls.append(1) or s.update(count=0)
    )
    assert isinstance(result, StoreUpdateConflict)
    assert result.updated is False
    assert (result.expected_instance_id, result.actual_instance_id) == (
        stale.instance_id,
        stale.instance_id,
    )
    assert (result.expected_version, result.actual_version) == (0, 1)
    assert calls == []
    assert c.get_store(d, "a").state["count"] == 7
    assert c.get_store(d, "a").version == 1


def test_update_from_another_instance_is_a_conflict(store: Store) -> None:
    d, c = store
    old = c.get_store(d, "a")
    c.delete_store(d, "a")
    new = c.get_store(d, "a")
    result = c.update_store_from(d, "a", snapshot=old, updater=lambda s: None)
    assert isinstance(result, StoreUpdateConflict)
    assert result.actual_instance_id == new.instance_id
    assert c.get_store(d, "a") == new


def test_update_from_runs_on_stored_state_not_on_the_callers_copy(store: Store) -> None:
    d, c = store
    snap = c.get_store(d, "a")
    snap.state["items"].append("edited by the caller")  # the caller's copy, not the store
    seen: list[Any] = []
    c.update_store_from(d, "a", snapshot=snap, updater=lambda s: seen.append(list(s["items"])))
    assert seen == [[]]


def test_snapshot_without_instance_id_is_refused(store: Store) -> None:
    d, c = store
    c.get_store(d, "a")
    bad = StoreSnapshot({"items": [], "count": 0}, "", 0)
    with pytest.raises(ValueError, match="read a fresh snapshot"):
        c.update_store_from(d, "a", snapshot=bad, updater=lambda s: None)
    with pytest.raises(ValueError, match="read a fresh snapshot"):
        c.delete_store_from(d, "a", snapshot=bad)
    assert c.get_store(d, "a").version == 0


@pytest.mark.parametrize(("given", "stored"), [(True, 1), (False, 0), (1.0, 1)])
def test_a_version_that_is_not_an_int_never_equals_the_stored_one(
    store: Store, given: Any, stored: int
) -> None:
    """``True == 1`` in Python: a snapshot of ``version=True`` passed for version 1 and
    committed over it (``False`` for version 0). A version is an ``int``, so such a
    snapshot is a conflict with the stored version, as any other mismatch is, and
    nothing changes (so is ``1.0``)."""
    d, c = store
    if stored:
        c.update_store(d, "a", updater=lambda s: s.update(count=1))
    current = c.get_store(d, "a")
    assert current.version == stored
    bad = StoreSnapshot(current.state, current.instance_id, given)
    calls: list[int] = []
    updated = c.update_store_from(
        d, "a", snapshot=bad, updater=lambda s: calls.append(1) or s.update(count=9)
    )
    assert updated == StoreUpdateConflict(current.instance_id, current.instance_id, given, stored)
    deleted = c.delete_store_from(d, "a", snapshot=bad)
    assert deleted == StoreDeleteConflict(current.instance_id, current.instance_id, given, stored)
    assert calls == []
    assert c.get_store(d, "a") == current
    assert c.list_stores(d) == ["a"]
    # The same snapshot with the int version still commits.
    exact = StoreSnapshot(current.state, current.instance_id, stored)
    assert c.delete_store_from(d, "a", snapshot=exact) == StoreDeleted()


def test_delete_from_current_snapshot(store: Store) -> None:
    d, c = store
    snap = c.get_store(d, "a")
    assert c.delete_store_from(d, "a", snapshot=snap) == StoreDeleted()
    assert c.list_stores(d) == []


def test_delete_from_stale_snapshot_is_a_conflict(store: Store) -> None:
    d, c = store
    snap = c.get_store(d, "a")
    c.update_store(d, "a", updater=lambda s: s.update(count=1))
    result = c.delete_store_from(d, "a", snapshot=snap)
    assert result == StoreDeleteConflict(snap.instance_id, snap.instance_id, 0, 1)
    assert (result.deleted, result.reason) == (False, "conflict")
    assert c.get_store(d, "a").state["count"] == 1


def test_delete_from_missing_store_creates_it_and_conflicts(store: Store) -> None:
    d, c = store
    gone = c.get_store(d, "a")
    c.delete_store(d, "a")
    result = c.delete_store_from(d, "a", snapshot=gone)
    assert isinstance(result, StoreDeleteConflict)
    created = c.get_store(d, "a")
    assert result.actual_instance_id == created.instance_id != gone.instance_id
    assert result.actual_version == 0
    assert c.list_stores(d) == ["a"]


def test_delete_store_is_a_no_op_on_a_missing_store(harness: Any, define: Any) -> None:
    calls: list[str] = []
    d = define(initial=lambda id: calls.append(id) or {"items": [], "count": 0})
    harness.client.delete_store(d, "never")
    assert harness.client.list_stores(d) == []
    assert calls == []


def test_list_stores_uses_code_point_order(harness: Any, define: Any) -> None:
    d = define()
    ids = ["b", "a", "B", "aa", "a b", "é", "z", "😀", "\uffef", "Z9", "10", "9", "_", "~"]
    for id in ids:
        harness.client.get_store(d, id)
    other = define()
    harness.client.get_store(other, "elsewhere")
    assert harness.client.list_stores(d) == sorted(ids)


def _stale_cache(c: Any, d: StoreDefinition, id: str) -> None:
    """Leave ``c`` remembering store ``id`` after it is deleted (as by another process)."""
    c.get_store(d, id)
    remembered = c.snapshots.get(d.name, id)
    c.delete_store(d, id)
    if remembered is not None:  # a client without a snapshot cache reads every time
        c.snapshots.put(d.name, id, remembered)


EXISTING_ONLY = [
    VersionCondition(any_version=True, existing_only=True),
    VersionCondition((("gone", 0),), existing_only=True),
]


@pytest.mark.parametrize("stale", [False, True], ids=["missing", "deleted-behind-the-cache"])
@pytest.mark.parametrize("condition", EXISTING_ONLY, ids=["any", "etag"])
def test_an_existing_only_condition_creates_no_missing_store(
    store: Store, condition: VersionCondition, stale: bool
) -> None:
    """``existing_only`` (the HTTP API's If-Match): a missing store accepts nothing, and
    neither the update nor the delete creates it, even when the store disappears after
    the client last saw it."""
    d, c = store
    if stale:
        _stale_cache(c, d, "a")
    calls: list[int] = []
    write = c.update_store_if(
        d, "a", updater=lambda s: calls.append(1) or s.update(count=1), condition=condition
    )
    expected = condition.versions[0] if condition.versions else ("", 0)
    assert write.result == StoreUpdateConflict(expected[0], "", expected[1], 0)
    assert calls == [] or stale  # a remembered row may be computed over, never committed
    assert c.list_stores(d) == []
    if stale:
        _stale_cache(c, d, "a")
    deleted = c.delete_store_if(d, "a", condition=condition)
    assert deleted == StoreDeleteConflict(expected[0], "", expected[1], 0)
    assert c.list_stores(d) == []


def test_an_existing_only_condition_writes_an_existing_store(store: Store) -> None:
    d, c = store
    snap = c.get_store(d, "a")
    any_version = VersionCondition(any_version=True, existing_only=True)
    write = c.update_store_if(d, "a", updater=lambda s: s.update(count=1), condition=any_version)
    assert write.result == StoreUpdated({"items": [], "count": 1}, 0, 1)
    at_1 = VersionCondition(((snap.instance_id, 1),), existing_only=True)
    write = c.update_store_if(d, "a", updater=lambda s: s.update(count=2), condition=at_1)
    assert write.result == StoreUpdated({"items": [], "count": 2}, 1, 2)
    at_2 = VersionCondition(((snap.instance_id, 2),), existing_only=True)
    assert c.delete_store_if(d, "a", condition=at_2) == StoreDeleted()
    assert c.list_stores(d) == []


CREATE_ONLY = VersionCondition(missing_only=True)


def test_a_missing_only_condition_creates_a_missing_store_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``missing_only`` (the HTTP API's ``If-None-Match: *``): an update creates a missing
    store; over an existing one it is a conflict expecting the instance ``""``, and
    changes nothing, also when the store was created after the client read it missing."""
    d, c = store
    write = c.update_store_if(d, "a", updater=lambda s: s.update(count=1), condition=CREATE_ONLY)
    assert write.result == StoreUpdated({"items": [], "count": 1}, 0, 1)
    snap = c.get_store(d, "a")
    assert write.instance_id == snap.instance_id
    calls: list[int] = []
    write = c.update_store_if(
        d, "a", updater=lambda s: calls.append(1) or s.update(count=2), condition=CREATE_ONLY
    )
    assert write.result == StoreUpdateConflict("", snap.instance_id, 0, 1)
    assert calls == []
    # Read as missing, created by another process before the commit: the commit expects a
    # missing store and loses; nothing is overwritten.
    read_store = c.read_store
    monkeypatch.setattr(c, "read_store", lambda *args: None)
    write = c.update_store_if(
        d, "b", updater=lambda s: s.update(count=3), condition=CREATE_ONLY
    )  # no one created b: created
    assert write.result == StoreUpdated({"items": [], "count": 3}, 0, 1)
    write = c.update_store_if(d, "a", updater=lambda s: s.update(count=4), condition=CREATE_ONLY)
    monkeypatch.setattr(c, "read_store", read_store)
    assert write.result == StoreUpdateConflict("", snap.instance_id, 0, 1)
    assert c.get_store(d, "a") == snap


def test_a_missing_only_delete_deletes_nothing(store: Store) -> None:
    d, c = store
    assert c.delete_store_if(d, "a", condition=CREATE_ONLY) == StoreDeleted()
    assert c.list_stores(d) == []
    snap = c.get_store(d, "a")
    assert c.delete_store_if(d, "a", condition=CREATE_ONLY) == StoreDeleteConflict(
        "", snap.instance_id, 0, 0
    )
    assert c.get_store(d, "a") == snap
