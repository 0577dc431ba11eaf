"""The applied-steps ledger: exactly once per (store, step) (design §3)."""

from __future__ import annotations

from typing import Any

from yieldstar_django import StoreSnapshot, StoreStepId
from yieldstar_django.core.results import StoreDeleted, StoreTakeMatched, StoreUpdated


def counting(calls: list[int], change: Any) -> Any:
    def updater(draft: Any) -> Any:
        calls.append(1)
        return change(draft)

    return updater


def test_update_with_step_id_applies_once(harness: Any, define: Any) -> None:
    d = define()
    c = harness.client
    step = StoreStepId("exec-1", "step-0")
    calls: list[int] = []
    add = counting(calls, lambda s: s.update(count=s["count"] + 1))
    first = c.update_store(d, "a", updater=add, step_id=step)
    c.update_store(d, "a", updater=lambda s: s["items"].append("later"))
    replay = c.update_store(d, "a", updater=add, step_id=step)
    assert replay == first
    assert calls == [1]
    snap = c.get_store(d, "a")
    assert (snap.state["count"], snap.version) == (1, 2)


def test_step_ids_are_per_store_and_per_step(harness: Any, define: Any) -> None:
    d = define()
    c = harness.client
    inc = lambda s: s.update(count=s["count"] + 1)  # noqa: E731
    c.update_store(d, "a", updater=inc, step_id=StoreStepId("e", "k"))
    c.update_store(d, "b", updater=inc, step_id=StoreStepId("e", "k"))
    c.update_store(d, "a", updater=inc, step_id=StoreStepId("e", "k2"))
    c.update_store(d, "a", updater=inc, step_id=StoreStepId("e2", "k"))
    assert c.get_store(d, "a").state["count"] == 3
    assert c.get_store(d, "b").state["count"] == 1


def test_ledger_lookup_comes_before_argument_checks(harness: Any, define: Any) -> None:
    d = define()
    c = harness.client
    step = StoreStepId("exec", "s")
    snap = c.get_store(d, "a")
    first = c.update_store_from(
        d, "a", snapshot=snap, updater=lambda s: s.update(count=1), step_id=step
    )

    async def async_updater(draft: Any) -> None:  # would be refused without a recorded result
        return None

    blank = StoreSnapshot(None, "", -1)
    assert c.update_store_from(d, "a", snapshot=blank, updater=async_updater, step_id=step) == first
    assert c.update_store_from(d, "a", snapshot=blank, updater=None, step_id=step) == first


def test_recorded_result_wins_over_the_version_check(harness: Any, define: Any) -> None:
    d = define()
    c = harness.client
    step = StoreStepId("exec", "s")
    snap = c.get_store(d, "a")
    first = c.update_store_from(
        d, "a", snapshot=snap, updater=lambda s: s.update(count=1), step_id=step
    )
    assert isinstance(first, StoreUpdated)
    c.update_store(d, "a", updater=lambda s: s.update(count=50))
    replay = c.update_store_from(
        d, "a", snapshot=snap, updater=lambda s: s.update(count=2), step_id=step
    )
    assert replay == first
    assert c.get_store(d, "a").state["count"] == 50


def test_recorded_result_survives_deletion_and_recreation(harness: Any, define: Any) -> None:
    d = define(initial=lambda id: {"jobs": ["j1"], "count": 0})
    c = harness.client
    take_step, update_step, delete_step = (StoreStepId("e", k) for k in ("take", "upd", "del"))
    took = c.take_from_store(
        d,
        "q",
        selector=lambda s: s["jobs"][0] if s["jobs"] else None,
        claim=lambda draft, job: draft["jobs"].remove(job),
        step_id=take_step,
    )
    updated = c.update_store(d, "q", updater=lambda s: s.update(count=1), step_id=update_step)
    snap = c.get_store(d, "q")
    assert c.delete_store_from(d, "q", snapshot=snap, step_id=delete_step) == StoreDeleted()

    # Missing store: the recorded results win over the existence check, creating nothing.
    assert c.take_from_store(d, "q", selector=None, claim=None, step_id=take_step) == took
    assert c.update_store(d, "q", updater=None, step_id=update_step) == updated
    assert c.delete_store_from(d, "q", snapshot=snap, step_id=delete_step) == StoreDeleted()
    assert c.list_stores(d) == []

    # Re-created store: still the recorded results, and the new instance is untouched.
    fresh = c.get_store(d, "q")
    assert c.take_from_store(d, "q", selector=None, claim=None, step_id=take_step) == took
    assert c.update_store(d, "q", updater=None, step_id=update_step) == updated
    assert c.delete_store_from(d, "q", snapshot=fresh, step_id=delete_step) == StoreDeleted()
    assert c.get_store(d, "q") == fresh


def test_matched_take_is_recorded_and_replayed_verbatim(harness: Any, define: Any) -> None:
    d = define(initial=lambda id: {"jobs": [1, 2, 3]})
    c = harness.client
    step = StoreStepId("e", "take")
    runs: list[int] = []

    def selector(state: Any) -> Any:
        runs.append(1)
        return state["jobs"][0] if state["jobs"] else None

    first = c.take_from_store(
        d, "q", selector=selector, claim=lambda draft, j: draft["jobs"].remove(j), step_id=step
    )
    replay = c.take_from_store(
        d, "q", selector=selector, claim=lambda draft, j: draft["jobs"].remove(j), step_id=step
    )
    assert replay == first == StoreTakeMatched(1, first.instance_id, 1)
    assert runs == [1]
    assert c.get_store(d, "q").state["jobs"] == [2, 3]


def test_unmatched_take_is_not_recorded(harness: Any, define: Any) -> None:
    d = define(initial=lambda id: {"jobs": []})
    c = harness.client
    step = StoreStepId("e", "take")
    pick = lambda s: s["jobs"][0] if s["jobs"] else None  # noqa: E731
    remove = lambda draft, j: draft["jobs"].remove(j)  # noqa: E731
    assert c.take_from_store(d, "q", selector=pick, claim=remove, step_id=step).matched is False
    c.update_store(d, "q", updater=lambda s: s["jobs"].append("job"))
    result = c.take_from_store(d, "q", selector=pick, claim=remove, step_id=step)
    assert result.matched is True and result.selected == "job"
    assert c.take_from_store(d, "q", selector=pick, claim=remove, step_id=step) == result
