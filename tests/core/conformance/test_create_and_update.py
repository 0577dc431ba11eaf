"""Creation from ``initial``, updates, the CAS loop and its retry cap.

See docs/internals/architecture.md#stores.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from tests.polling import HANG_SECONDS, join_or_fail
from yieldstar_django import StoreContentionError, StoreSnapshot, StoreUpdateResult


def test_get_creates_version_zero_from_initial(harness: Any, define: Any) -> None:
    calls: list[str] = []

    def initial(id: str) -> dict[str, Any]:
        calls.append(id)
        return {"owner": id, "items": []}

    d = define(initial=initial)
    first = harness.client.get_store(d, "a")
    assert first.state == {"owner": "a", "items": []}
    assert first.version == 0
    assert first.instance_id
    again = harness.client.get_store(d, "a")
    assert again == first
    assert calls == ["a"], "initial runs only when the store is missing"


def test_each_creation_is_a_new_instance(harness: Any, define: Any) -> None:
    d = define()
    a = harness.client.get_store(d, "a")
    b = harness.client.get_store(d, "b")
    harness.client.delete_store(d, "a")
    a2 = harness.client.get_store(d, "a")
    assert len({a.instance_id, b.instance_id, a2.instance_id}) == 3
    assert a2.version == 0


def test_update_of_missing_store_commits_version_one(harness: Any, define: Any) -> None:
    d = define()
    result = harness.client.update_store(d, "x", updater=lambda s: s.update(count=5))
    assert result == StoreUpdateResult({"items": [], "count": 5}, previous_version=0, version=1)
    snap = harness.client.get_store(d, "x")
    assert (snap.version, snap.state["count"]) == (1, 5)


def test_updater_mutates_draft_or_returns_replacement(harness: Any, define: Any) -> None:
    d = define()
    c = harness.client
    assert c.update_store(d, "a", updater=lambda s: s["items"].append(1)).state["items"] == [1]
    replaced = c.update_store(d, "a", updater=lambda s: {"items": [9], "count": 9})
    assert replaced.state == {"items": [9], "count": 9}
    assert replaced.version == 2
    # None means "the draft": the in-place change is kept.
    assert c.update_store(d, "a", updater=lambda s: s.update(count=10)).state["count"] == 10


def test_draft_is_made_of_dicts_and_lists(harness: Any, define: Any) -> None:
    import json

    d = define(initial=lambda id: {"nested": {"list": [{"x": 1}]}})
    seen: list[Any] = []

    def updater(draft: Any) -> None:
        seen.append(isinstance(draft, dict))
        seen.append(isinstance(draft["nested"]["list"], list))
        seen.append(json.loads(json.dumps(draft)) == {"nested": {"list": [{"x": 1}]}})

    harness.client.update_store(d, "a", updater=updater)
    assert seen == [True, True, True]


def test_results_and_snapshots_are_independent_copies(harness: Any, define: Any) -> None:
    d = define()
    c = harness.client
    result = c.update_store(d, "a", updater=lambda s: s["items"].append({"n": 1}))
    result.state["items"][0]["n"] = 999
    snap = c.get_store(d, "a")
    snap.state["items"].append("junk")
    assert c.get_store(d, "a").state == {"items": [{"n": 1}], "count": 0}


def test_conflict_recomputes_from_the_newer_snapshot(harness: Any, define: Any) -> None:
    d = define()
    c = harness.client
    c.get_store(d, "a")
    calls: list[int] = []

    def updater(draft: Any) -> None:
        calls.append(draft["count"])
        if len(calls) == 1:
            # Another writer wins the race between our read and our commit.
            c.update_store(d, "a", updater=lambda s: s.update(count=s["count"] + 100))
        draft["count"] += 1

    result = c.update_store(d, "a", updater=updater)
    assert calls == [0, 100]
    assert (result.state["count"], result.previous_version, result.version) == (101, 1, 2)


def test_retry_cap_raises_contention_and_commits_nothing_of_its_own(
    harness: Any, define: Any
) -> None:
    d = define()
    c = harness.client
    c.get_store(d, "a")

    def always_loses(draft: Any) -> None:
        c.update_store(d, "a", updater=lambda s: s.update(count=s["count"] + 1))
        draft["items"].append("mine")

    with (
        harness.configure(CAS_MAX_ATTEMPTS=3, CAS_BACKOFF_BASE=0.0, CAS_BACKOFF_MAX=0.0),
        pytest.raises(StoreContentionError) as info,
    ):
        c.update_store(d, "a", updater=always_loses)
    assert info.value.attempts == 3
    snap = c.get_store(d, "a")
    assert snap.state == {"items": [], "count": 3}
    assert snap.version == 3


def test_concurrent_first_touches_record_one_initial_state(harness: Any, define: Any) -> None:
    d = define(initial=lambda id: {"items": [], "count": 0})
    results: list[StoreSnapshot] = []
    barrier = threading.Barrier(4, timeout=HANG_SECONDS)

    def touch() -> None:
        barrier.wait()
        results.append(harness.client.get_store(d, "first"))

    assert not _in_threads(touch, 4)
    assert len({r.instance_id for r in results}) == 1
    assert {r.version for r in results} == {0}


def test_threaded_increments_lose_nothing(harness: Any, define: Any) -> None:
    d = define()

    def work() -> None:
        for _ in range(15):
            harness.client.update_store(d, "n", updater=lambda s: s.update(count=s["count"] + 1))

    with harness.configure(CAS_MAX_ATTEMPTS=1000):
        assert not _in_threads(work, 4)
    snap = harness.client.get_store(d, "n")
    assert snap.state["count"] == 60
    assert snap.version == 60


def _in_threads(work: Callable[[], None], count: int) -> list[BaseException]:
    """Run ``work`` in ``count`` threads at once (each closing its database connections);
    return what they raised."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # pragma: no cover - reported by the caller
            errors.append(exc)
        finally:
            _close_thread_connections()

    threads = [threading.Thread(target=run) for _ in range(count)]
    for t in threads:
        t.start()
    join_or_fail(*threads, what="the threads")
    return errors


def _close_thread_connections() -> None:
    try:
        from django.db import connections
    except ImportError:  # pragma: no cover
        return
    connections.close_all()
