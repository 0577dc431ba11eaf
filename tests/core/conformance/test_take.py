"""``take_from_store``: select and claim atomically (docs/internals/architecture.md#stores)."""

from __future__ import annotations

from typing import Any

import pytest

from yieldstar_django.core.results import StoreTakeMatched, StoreTakeUnmatched
from yieldstar_django.core.selectors import SelectorMutationError

QUEUE = {"jobs": [{"id": 1, "taken": False}, {"id": 2, "taken": False}], "flag": 0, "label": ""}


def first_free(state: Any) -> Any:
    for job in state["jobs"]:
        if not job["taken"]:
            return job
    return None


def mark_taken(draft: Any, job: Any) -> None:
    job["taken"] = True


def test_matched_take_claims_with_one_version_bump(harness: Any, define: Any) -> None:
    d = define(initial=lambda id: QUEUE)
    c = harness.client
    first = c.take_from_store(d, "q", selector=first_free, claim=mark_taken)
    assert isinstance(first, StoreTakeMatched)
    assert first.matched is True
    assert first.selected == {"id": 1, "taken": True}, "selected is read after the claim"
    assert first.version == 1
    second = c.take_from_store(d, "q", selector=first_free, claim=mark_taken)
    assert second.selected["id"] == 2
    assert second.version == 2
    assert c.get_store(d, "q").state["jobs"] == [{"id": 1, "taken": True}, {"id": 2, "taken": True}]
    assert harness.changed_paths(d, "q")[-1] == (("jobs", 1, "taken"),)


def test_selected_is_a_durable_copy(harness: Any, define: Any) -> None:
    d = define(initial=lambda id: QUEUE)
    c = harness.client
    result = c.take_from_store(d, "q", selector=first_free, claim=mark_taken)
    result.selected["id"] = 99
    assert c.get_store(d, "q").state["jobs"][0]["id"] == 1
    assert type(result.selected) is dict


@pytest.mark.parametrize("value", [0, "", [], {}, 0.0])
def test_falsy_values_other_than_none_and_false_match(
    harness: Any, define: Any, value: Any
) -> None:
    d = define(initial=lambda id: QUEUE)
    result = harness.client.take_from_store(d, "q", selector=lambda s: value, claim=None)
    assert result.matched is True
    assert result.selected == value
    assert type(result.selected) is type(value)
    assert result.version == 1


@pytest.mark.parametrize("value", [None, False])
def test_none_and_false_do_not_match(harness: Any, define: Any, value: Any) -> None:
    d = define(initial=lambda id: QUEUE)
    c = harness.client
    c.get_store(d, "q")
    result = c.take_from_store(
        d, "q", selector=lambda s: (s["flag"] == 1) or value, claim=mark_taken
    )
    assert isinstance(result, StoreTakeUnmatched)
    assert result.version == 0
    assert result.read_paths == (("flag",),)
    assert c.get_store(d, "q").version == 0


def test_unmatched_take_creates_a_missing_store_and_returns_read_paths(
    harness: Any, define: Any
) -> None:
    d = define(initial=lambda id: {"jobs": [], "open": False})
    c = harness.client
    result = c.take_from_store(
        d, "new", selector=lambda s: s["open"] and (s["jobs"][0] if s["jobs"] else None), claim=None
    )
    assert result.matched is False
    assert c.list_stores(d) == ["new"]
    snap = c.get_store(d, "new")
    assert (result.instance_id, result.version) == (snap.instance_id, 0)
    assert result.read_paths == (("open",),)


def test_structural_reads_record_the_container(harness: Any, define: Any) -> None:
    d = define(initial=lambda id: {"jobs": [{"id": 1, "taken": True}], "meta": {"k": 1}})
    c = harness.client
    result = c.take_from_store(
        d,
        "q",
        selector=lambda s: (len(s["jobs"]) > 5 and s["jobs"][5]) or ("x" in s["meta"]) or None,
        claim=None,
    )
    assert result.matched is False
    assert set(result.read_paths) == {("jobs",), ("meta",)}
    scan = c.take_from_store(d, "q", selector=first_free, claim=mark_taken)
    assert scan.matched is False
    assert ("jobs",) in scan.read_paths


def test_selector_cannot_mutate(harness: Any, define: Any) -> None:
    d = define(initial=lambda id: QUEUE)
    c = harness.client
    c.get_store(d, "q")

    def sneaky(state: Any) -> Any:
        state["jobs"][0]["taken"] = True
        return state["jobs"][0]

    with pytest.raises(SelectorMutationError):
        c.take_from_store(d, "q", selector=sneaky, claim=None)
    with pytest.raises(TypeError):
        c.take_from_store(d, "q", selector=lambda s: s["jobs"].append(1), claim=None)
    with pytest.raises(TypeError):
        c.take_from_store(d, "q", selector=lambda s: s.pop("jobs"), claim=None)
    assert c.get_store(d, "q").version == 0


def test_claim_through_a_derived_selection_is_recorded(harness: Any, define: Any) -> None:
    d = define(initial=lambda id: {"jobs": [{"id": i, "taken": False} for i in range(4)]})
    c = harness.client

    def evens(state: Any) -> Any:
        return [job for job in state["jobs"] if job["id"] % 2 == 0] or None

    def claim_all(draft: Any, jobs: Any) -> None:
        for job in jobs:
            job["taken"] = True

    result = c.take_from_store(d, "q", selector=evens, claim=claim_all)
    assert result.selected == [{"id": 0, "taken": True}, {"id": 2, "taken": True}]
    assert [j["taken"] for j in c.get_store(d, "q").state["jobs"]] == [True, False, True, False]
    assert set(harness.changed_paths(d, "q")[-1]) == {("jobs", 0, "taken"), ("jobs", 2, "taken")}


def test_claim_may_use_the_draft(harness: Any, define: Any) -> None:
    d = define(initial=lambda id: {"jobs": ["a", "b"], "done": []})
    c = harness.client

    def move(draft: Any, job: Any) -> None:
        draft["jobs"].remove(job)
        draft["done"].append(job)

    result = c.take_from_store(
        d, "q", selector=lambda s: s["jobs"][0] if s["jobs"] else None, claim=move
    )
    assert result.selected == "a"
    assert c.get_store(d, "q").state == {"jobs": ["b"], "done": ["a"]}


def test_take_conflict_reruns_selector_on_the_newer_state(harness: Any, define: Any) -> None:
    d = define(initial=lambda id: QUEUE)
    c = harness.client
    c.get_store(d, "q")
    runs: list[int] = []

    def selector(state: Any) -> Any:
        runs.append(1)
        if len(runs) == 1:
            c.take_from_store(d, "q", selector=first_free, claim=mark_taken)  # a rival claims job 1
        return first_free(state)

    result = c.take_from_store(d, "q", selector=selector, claim=mark_taken)
    assert result.selected["id"] == 2
    assert len(runs) == 2
    assert c.get_store(d, "q").version == 2
