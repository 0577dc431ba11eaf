"""The applied-steps ledger: exactly once per (store, step), and a step replays only to
its own kind of operation (docs/internals/architecture.md#ledger)."""

from __future__ import annotations

from typing import Any

import pytest

from yieldstar_django import StoreSnapshot, StoreStepId
from yieldstar_django.core.commits import StoreDeletion, StoreMutation
from yieldstar_django.core.errors import StoreStepMismatchError
from yieldstar_django.core.results import (
    StoreDeleted,
    StoreTakeMatched,
    StoreUpdated,
    StoreUpdateResult,
)


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


def _recorded_update(harness: Any, define: Any) -> tuple[Any, Any, StoreStepId, Any, Any]:
    """A client, a store ``a`` and step ``exec/s``, recorded by a conditional update to
    ``{"count": 1}`` from the store's first snapshot; that snapshot and the result."""
    d = define()
    c = harness.client
    step = StoreStepId("exec", "s")
    snap = c.get_store(d, "a")
    first = c.update_store_from(
        d, "a", snapshot=snap, updater=lambda s: s.update(count=1), step_id=step
    )
    return c, d, step, snap, first


def test_ledger_lookup_comes_before_argument_checks(harness: Any, define: Any) -> None:
    c, d, step, _, first = _recorded_update(harness, define)

    async def async_updater(draft: Any) -> None:  # would be refused without a recorded result
        return None

    blank = StoreSnapshot(None, "", -1)
    assert c.update_store_from(d, "a", snapshot=blank, updater=async_updater, step_id=step) == first
    assert c.update_store_from(d, "a", snapshot=blank, updater=None, step_id=step) == first


def test_recorded_result_wins_over_the_version_check(harness: Any, define: Any) -> None:
    c, d, step, snap, first = _recorded_update(harness, define)
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


# --- the operation kind: a step id replayed by another kind of operation ----------------


def _record_each(c: Any, d: Any) -> dict[str, StoreStepId]:
    """One step id per operation kind, each recorded on store "a"."""
    steps = {kind: StoreStepId("exec-kinds", kind) for kind in ("update", "take", "delete")}
    c.update_store(d, "a", updater=lambda s: s["items"].append("x"), step_id=steps["update"])
    c.take_from_store(
        d,
        "a",
        selector=lambda s: s["items"][0] if s["items"] else None,
        claim=lambda s, _: s["items"].pop(0),
        step_id=steps["take"],
    )
    c.delete_store_from(d, "a", snapshot=c.get_store(d, "a"), step_id=steps["delete"])
    return steps


def _operations(c: Any, d: Any) -> dict[str, Any]:
    """Each operation kind, as a call taking a step id (on store "a")."""

    def fail(*args: Any) -> Any:
        raise AssertionError("user code ran for a recorded step")

    return {
        "update": lambda step: c.update_store(d, "a", updater=fail, step_id=step),
        "update_from": lambda step: c.update_store_from(
            d, "a", snapshot=c.get_store(d, "a"), updater=fail, step_id=step
        ),
        "update_if": lambda step: (
            c.update_store_if(d, "a", updater=fail, condition=None, step_id=step).result
        ),
        "take": lambda step: c.take_from_store(d, "a", selector=fail, claim=fail, step_id=step),
        "delete": lambda step: c.delete_store_from(
            d, "a", snapshot=c.get_store(d, "a"), step_id=step
        ),
    }


KIND_OF = {"update": "update", "update_from": "update", "update_if": "update", "take": "take"}
KIND_OF["delete"] = "delete"


def test_a_step_replayed_by_another_kind_of_operation_raises(harness: Any, define: Any) -> None:
    """The recorded result of one kind never comes back typed as another (and nothing
    changes): update, take and delete are three kinds; update, update_from and update_if
    are one."""
    d = define()
    c = harness.client
    steps = _record_each(c, d)
    before = c.get_store(d, "a")
    for name, call in _operations(c, d).items():
        for recorded, step in steps.items():
            if KIND_OF[name] == recorded:
                result = call(step)
                assert (
                    type(result).__name__
                    in {
                        "update": ("StoreUpdateResult",),
                        "take": ("StoreTakeMatched",),
                        "delete": ("StoreDeleted",),
                    }[recorded]
                )
                continue
            with pytest.raises(StoreStepMismatchError) as caught:
                call(step)
            assert (caught.value.recorded, caught.value.requested) == (recorded, KIND_OF[name])
            assert caught.value.step_id == step
            assert step.step_key in str(caught.value)
    after = c.get_store(d, "a")
    assert (after.instance_id, after.version, after.state) == (
        before.instance_id,
        before.version,
        before.state,
    )


def test_update_and_update_from_replay_one_result_type(harness: Any, define: Any) -> None:
    d = define()
    c = harness.client
    step = StoreStepId("exec", "one-kind")
    first = c.update_store(d, "a", updater=lambda s: s.update(count=7), step_id=step)
    assert isinstance(first, StoreUpdateResult) and first.updated is True
    again = c.update_store_from(d, "a", snapshot=c.get_store(d, "a"), updater=None, step_id=step)
    assert again == first
    assert StoreUpdated is StoreUpdateResult


def test_the_commit_reports_a_step_recorded_by_another_kind(harness: Any, define: Any) -> None:
    """The commit path itself (the PL/pgSQL function, the statements, memory) checks the
    kind: a step recorded as a delete between an update's read and its commit is a
    ``step-mismatch``, and the update is not written."""
    d = define()
    c = harness.client
    step = StoreStepId("exec", "raced")
    c.delete_store_from(d, "a", snapshot=c.get_store(d, "a"), step_id=step)
    row = c.read_store(d, "a")
    assert row is None
    stored = c.get_store(d, "a")
    current = c.read_store(d, "a")
    assert current is not None
    mutation = StoreMutation(
        d, "a", current, False, '{"count":99,"items":[]}', [("count",)], step,
        '{"kind":"update","previous_version":0,"state":{"count":99,"items":[]},"version":1}',
        "update",
    )  # fmt: skip
    outcome = c.commit_mutation(mutation)
    assert outcome.status == "step-mismatch"
    assert outcome.recorded is not None and '"delete"' in outcome.recorded
    deletion = StoreDeletion(d, "a", current, step, '{"kind":"delete"}')
    assert c.commit_deletion(deletion).status == "already-applied"
    assert c.get_store(d, "a") == stored
    take = StoreMutation(
        d, "a", current, False, current.encoded, [], step,
        '{"instance_id":"i","kind":"take","selected":1,"version":1}', "take",
    )  # fmt: skip
    assert c.commit_mutation(take).status == "step-mismatch"
    assert c.get_store(d, "a") == stored
