"""Waiters and wakes: registration is linearizable with mutations.

See docs/internals/architecture.md#waiters.
"""

from __future__ import annotations

from typing import Any

from yieldstar_django import StoreWaiter
from yieldstar_django.core.results import Wake


def wait_on(
    harness: Any, d: Any, id: str, selector: Any, execution_id: str = "exec"
) -> StoreWaiter:
    result = harness.client.take_from_store(d, id, selector=selector, claim=None)
    assert result.matched is False
    waiter = StoreWaiter(
        workflow_id="wf",
        execution_id=execution_id,
        step_key="take-0",
        store_name=d.name,
        store_id=id,
        instance_id=result.instance_id,
        since_version=result.version,
        read_paths=result.read_paths,
    )
    harness.client.register_waiter(waiter)
    return waiter


def ready_job(state: Any) -> Any:
    return state["jobs"][0] if state["jobs"] else None


def test_current_waiter_is_not_woken_until_an_intersecting_change(
    harness: Any, define: Any
) -> None:
    d = define(initial=lambda id: {"jobs": [], "other": 0})
    wait_on(harness, d, "q", ready_job)
    assert harness.wakes == []
    harness.client.update_store(d, "q", updater=lambda s: s.update(other=1))
    assert harness.wakes == [], "a disjoint change wakes nobody"
    harness.client.update_store(d, "q", updater=lambda s: s["jobs"].append("j"))
    assert harness.wakes == [Wake("exec", "wf")]


def test_stale_registration_is_woken_at_once(harness: Any, define: Any) -> None:
    d = define(initial=lambda id: {"jobs": [], "other": 0})
    result = harness.client.take_from_store(d, "q", selector=ready_job, claim=None)
    harness.client.update_store(d, "q", updater=lambda s: s.update(other=1))  # even a disjoint one
    harness.client.register_waiter(
        StoreWaiter(
            "wf", "exec", "k", d.name, "q", result.instance_id, result.version, result.read_paths
        )
    )
    assert harness.wakes == [Wake("exec", "wf")]


def test_waiter_on_another_instance_is_woken_at_once(harness: Any, define: Any) -> None:
    d = define(initial=lambda id: {"jobs": []})
    result = harness.client.take_from_store(d, "q", selector=ready_job, claim=None)
    harness.client.delete_store(d, "q")
    harness.client.get_store(d, "q")
    harness.client.register_waiter(
        StoreWaiter(
            "wf", "exec", "k", d.name, "q", result.instance_id, result.version, result.read_paths
        )
    )
    assert harness.wakes == [Wake("exec", "wf")]


def test_a_waiter_is_woken_once_per_registration(harness: Any, define: Any) -> None:
    """It stays registered until removed, but only the first intersecting change after its
    registration wakes it: its execution registers again if its step still has to wait
    (so N takers woken by N items are not woken again by each other's claims)."""
    d = define(initial=lambda id: {"jobs": []})
    wait_on(harness, d, "q", ready_job)
    harness.client.update_store(d, "q", updater=lambda s: s["jobs"].append(1))
    harness.client.update_store(d, "q", updater=lambda s: s["jobs"].append(2))
    assert [w.execution_id for w in harness.wakes] == ["exec"]
    assert len(harness.waiters(d, "q")) == 1
    harness.client.update_store(d, "q", updater=lambda s: s["jobs"].clear())
    wait_on(harness, d, "q", ready_job)  # the step ran again and still waits
    harness.client.update_store(d, "q", updater=lambda s: s["jobs"].append(3))
    assert [w.execution_id for w in harness.wakes] == ["exec", "exec"]
    harness.client.remove_waiters("exec", "take-0")
    assert harness.waiters(d, "q") == []
    harness.client.update_store(d, "q", updater=lambda s: s["jobs"].append(4))
    assert len(harness.wakes) == 2


def test_a_waiter_registered_behind_a_change_is_woken_at_once_and_only_then(
    harness: Any, define: Any
) -> None:
    d = define(initial=lambda id: {"jobs": []})
    wait_on(harness, d, "q", ready_job)
    harness.client.update_store(d, "q", updater=lambda s: s["jobs"].append(1))
    missed = harness.client.take_from_store(d, "q", selector=lambda s: None, claim=None)
    harness.client.update_store(d, "q", updater=lambda s: s["jobs"].append(2))
    harness.client.register_waiter(
        StoreWaiter("wf", "exec", "take-0", d.name, "q", missed.instance_id, missed.version, ())
    )
    assert [w.execution_id for w in harness.wakes] == ["exec", "exec"]
    harness.client.update_store(d, "q", updater=lambda s: s["jobs"].append(3))
    assert len(harness.wakes) == 2, "woken by its registration, not again until the next"


def test_claims_of_woken_takers_do_not_wake_each_other(harness: Any, define: Any) -> None:
    d = define(initial=lambda id: {"jobs": []})
    takers = [f"taker{k}" for k in range(5)]
    for taker in takers:
        wait_on(harness, d, "q", ready_job, execution_id=taker)
    harness.client.update_store(d, "q", updater=lambda s: s["jobs"].extend(range(5)))
    assert [w.execution_id for w in harness.wakes] == takers, "one wake each, in order"
    for taker in takers:  # each resumes and claims an item, its waiter gone with the claim
        result = harness.client.take_from_store(
            d, "q", selector=ready_job, claim=lambda draft, job: draft["jobs"].remove(job)
        )
        assert result.matched
        harness.client.remove_waiters(taker, "take-0")
    assert len(harness.wakes) == 5


def test_prefix_intersection_in_both_directions(harness: Any, define: Any) -> None:
    d = define(initial=lambda id: {"a": {"b": {"c": 0}}, "z": 0})
    wait_on(harness, d, "s", lambda s: s["a"]["b"]["c"] == 1 or None, execution_id="deep")
    wait_on(harness, d, "s", lambda s: s["a"] == {"x": 1} or None, execution_id="shallow")
    harness.client.update_store(d, "s", updater=lambda s: {"a": {"b": {"c": 0}}, "z": 1})
    assert harness.wakes == [], "a replacement that changes only z is diffed down to z"
    harness.client.update_store(d, "s", updater=lambda s: s.update(a={"b": {"c": 2}}))
    assert {w.execution_id for w in harness.wakes} == {"deep", "shallow"}
    harness.wakes.clear()
    wait_on(harness, d, "s", lambda s: s["a"]["b"]["c"] == 1 or None, execution_id="deep")
    wait_on(harness, d, "s", lambda s: s["a"] == {"x": 1} or None, execution_id="shallow")
    harness.client.update_store(d, "s", updater=lambda s: s["a"]["b"].update(c=5))
    assert {w.execution_id for w in harness.wakes} == {"deep", "shallow"}


def test_list_shift_wakes_readers_of_any_element(harness: Any, define: Any) -> None:
    d = define(initial=lambda id: {"jobs": ["a", "b", "c"]})
    wait_on(harness, d, "q", lambda s: s["jobs"][2] == "x" or None, execution_id="third")
    harness.client.update_store(d, "q", updater=lambda s: s["jobs"].append("d"))
    assert harness.wakes == []
    harness.client.update_store(d, "q", updater=lambda s: s["jobs"].insert(0, "z"))
    assert [w.execution_id for w in harness.wakes] == ["third"]


def test_last_element_readers_wake_on_append(harness: Any, define: Any) -> None:
    d = define(initial=lambda id: {"log": ["a"]})
    wait_on(harness, d, "l", lambda s: s["log"][-1] == "done" or None, execution_id="tail")
    harness.client.update_store(d, "l", updater=lambda s: s["log"].append("done"))
    assert [w.execution_id for w in harness.wakes] == ["tail"]


def test_deleting_a_store_wakes_and_removes_its_waiters(harness: Any, define: Any) -> None:
    d = define(initial=lambda id: {"jobs": []})
    wait_on(harness, d, "q", ready_job, execution_id="one")
    wait_on(harness, d, "q", ready_job, execution_id="two")
    harness.client.delete_store(d, "q")
    assert {w.execution_id for w in harness.wakes} == {"one", "two"}
    assert harness.waiters(d, "q") == []


def test_delete_from_wakes_waiters(harness: Any, define: Any) -> None:
    d = define(initial=lambda id: {"jobs": []})
    wait_on(harness, d, "q", ready_job)
    snap = harness.client.get_store(d, "q")
    assert harness.client.delete_store_from(d, "q", snapshot=snap).deleted is True
    assert harness.wakes == [Wake("exec", "wf")]


def test_matched_take_wakes_intersecting_waiters(harness: Any, define: Any) -> None:
    d = define(initial=lambda id: {"jobs": ["a"], "count": 0})
    wait_on(harness, d, "q", lambda s: s["count"] > 0 or None, execution_id="counter")
    harness.client.take_from_store(
        d, "q", selector=ready_job, claim=lambda draft, j: draft.update(count=draft["count"] + 1)
    )
    assert [w.execution_id for w in harness.wakes] == ["counter"]


def test_changed_paths_are_recorded_precisely(harness: Any, define: Any) -> None:
    d = define(initial=lambda id: {"items": [1, 2], "meta": {"a": 1, "b": 2}})
    c = harness.client
    c.update_store(d, "p", updater=lambda s: s["meta"].update(a=5))
    c.update_store(d, "p", updater=lambda s: s["items"].append(3))
    c.update_store(d, "p", updater=lambda s: s["items"].insert(0, 0))
    c.update_store(d, "p", updater=lambda s: s["meta"].__delitem__("b"))
    c.update_store(d, "p", updater=lambda s: {**s, "meta": {"a": 5, "c": 1}})
    assert harness.changed_paths(d, "p") == [
        (("meta", "a"),),
        (("items", 2),),
        (("items",),),
        (("meta", "b"),),
        (("meta", "c"),),
    ]


def test_a_root_change_wakes_a_waiter_that_read_nothing(harness: Any, define: Any) -> None:
    """The rule of ``core.paths.wakes_waiter``: memory used to skip this waiter, the
    database clients woke it."""
    d = define(initial=lambda id: {"jobs": []})
    waiter = wait_on(harness, d, "q", lambda state: None)
    assert waiter.read_paths == ()
    harness.client.update_store(d, "q", updater=lambda s: {"jobs": ["j"]})  # diffed: not root
    assert harness.wakes == []
    harness.client.update_store(d, "q", updater=lambda s: ["now", "a", "list"])
    assert harness.changed_paths(d, "q")[-1] == ((),)
    assert harness.wakes == [Wake("exec", "wf")]


def test_a_change_of_thousands_of_paths_wakes_exactly_its_readers(
    harness: Any, define: Any
) -> None:
    """The waiter lookup of one commit probes the index once per key of each changed path:
    thousands of them must neither fail the commit (SQLite refuses a compound SELECT of
    more than 500 terms; PostgreSQL parses thousands of UNION ALL branches past
    ``max_stack_depth``) nor miss a reader."""
    n = 5000
    d = define(initial=lambda id: {"jobs": [], "fields": {"k0": {"v": -1}}})
    wait_on(harness, d, "q", lambda s: s["fields"].get(f"k{n - 1}"), execution_id="last")
    wait_on(harness, d, "q", lambda s: s["fields"]["k0"]["v"] >= 0 or None, execution_id="deep")
    wait_on(harness, d, "q", lambda s: s["jobs"] or None, execution_id="jobs")
    harness.client.update_store(
        d, "q", updater=lambda s: s["fields"].update({f"k{i}": {"v": i} for i in range(n)})
    )
    assert len(harness.changed_paths(d, "q")[-1]) == n
    assert sorted(w.execution_id for w in harness.wakes) == ["deep", "last"]


def test_a_selector_comparing_two_parts_wakes_on_a_change_to_either(
    harness: Any, define: Any
) -> None:
    """``s["a"] == s["b"]`` reads both dicts whole, even after a read of ``s["b"]["ok"]``."""
    d = define(initial=lambda id: {"a": {"v": 1, "ok": True}, "b": {"v": 2, "ok": True}})

    def same(s: Any) -> Any:
        return (s["b"]["ok"] and s["a"] == s["b"]) or None

    wait_on(harness, d, "q", same)
    harness.client.update_store(d, "q", updater=lambda s: s["b"].update(v=1))
    assert harness.client.take_from_store(d, "q", selector=same, claim=None).matched
    assert harness.wakes == [Wake("exec", "wf")], "the change made the selector match"


def first_job_by_type(state: Any) -> Any:
    """The usual idiom: test the types, then index. A selector sees read-only views; they
    must pass ``isinstance(..., dict)`` and ``isinstance(..., list)`` as what they stand for."""
    if not isinstance(state, dict):
        return None
    jobs = state["jobs"]
    if isinstance(jobs, list) and jobs and isinstance(jobs[0], dict):
        return jobs[0]
    return None


def pop_job(draft: Any, selected: Any) -> None:
    assert isinstance(draft, dict) and isinstance(draft["jobs"], list)
    assert isinstance(selected, dict)
    draft["jobs"].pop(0)


def test_a_selector_testing_isinstance_gets_the_job_it_waited_for(
    harness: Any, define: Any
) -> None:
    """Before, such a selector said "nothing" however many jobs arrived: the waiter was
    woken and the take ran again, and never matched (a lost wake, with no error)."""
    d = define(initial=lambda id: {"jobs": [], "other": 0})
    wait_on(harness, d, "q", first_job_by_type)
    harness.client.update_store(d, "q", updater=lambda s: s.update(other=1))
    assert harness.wakes == [], "a disjoint change wakes nobody"
    harness.client.update_store(d, "q", updater=lambda s: s["jobs"].append({"id": 7}))
    assert harness.wakes == [Wake("exec", "wf")]
    result = harness.client.take_from_store(d, "q", selector=first_job_by_type, claim=pop_job)
    assert result.matched is True
    assert result.selected == {"id": 7}
    assert harness.client.get_store(d, "q").state == {"jobs": [], "other": 1}
