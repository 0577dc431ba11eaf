"""``SnapshotCache``: bounded, least recently used out, never moves an instance backwards."""

from __future__ import annotations

from yieldstar_django.core.commits import StoredState
from yieldstar_django.core.snapshots import SnapshotCache


def test_least_recently_used_goes_first() -> None:
    cache = SnapshotCache(capacity=2)
    cache.put("s", "a", StoredState("i", 0, "{}"))
    cache.put("s", "b", StoredState("i", 0, "{}"))
    assert cache.get("s", "a") is not None  # a is now the most recent
    cache.put("s", "c", StoredState("i", 0, "{}"))
    assert cache.get("s", "b") is None
    assert cache.get("s", "a") is not None and cache.get("s", "c") is not None
    assert len(cache) == 2


def test_an_older_version_of_the_same_instance_is_not_put_back() -> None:
    cache = SnapshotCache()
    cache.put("s", "a", StoredState("i", 3, "{}"))
    cache.put("s", "a", StoredState("i", 2, "{}"))
    assert cache.get("s", "a") == StoredState("i", 3, "{}")
    cache.put("s", "a", StoredState("other", 0, "{}"))
    assert cache.get("s", "a") == StoredState("other", 0, "{}")


def test_long_rows_and_capacity_zero_keep_nothing() -> None:
    cache = SnapshotCache(capacity=4, max_chars=10)
    cache.put("s", "a", StoredState("i", 0, "{}"))
    cache.put("s", "a", StoredState("i", 1, '{"k":"0123456789"}'))
    assert cache.get("s", "a") is None, "a row too long to keep drops the older one too"
    off = SnapshotCache(capacity=0)
    off.put("s", "a", StoredState("i", 0, "{}"))
    assert off.get("s", "a") is None
