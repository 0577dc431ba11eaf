"""Cohorts of waiters: takers with the same selector are woken one at a time.

See docs/concepts/waiters.md#takers-with-the-same-selector.
"""

from __future__ import annotations

from typing import Any

from yieldstar_django import StoreWaiter
from yieldstar_django.core.results import StoreStepId

from .test_waiters import ready_job


def wait_in(
    harness: Any, d: Any, execution_id: str, cohort: str | None = "jobs", selector: Any = ready_job
) -> None:
    result = harness.client.take_from_store(d, "q", selector=selector, claim=None)
    assert result.matched is False
    harness.client.register_waiter(
        StoreWaiter(
            "wf",
            execution_id,
            "take-0",
            d.name,
            "q",
            result.instance_id,
            result.version,
            result.read_paths,
            cohort,
        )
    )


def woken(harness: Any) -> list[str]:
    return [wake.execution_id for wake in harness.wakes]


def push(harness: Any, d: Any, job: int) -> None:
    harness.client.update_store(d, "q", updater=lambda s: s["jobs"].append(job))


def claim(harness: Any, d: Any, execution_id: str) -> Any:
    """The woken taker's step: take and claim, then drop its waiter (as the runtime does
    when the heap records the step)."""
    result = harness.client.take_from_store(
        d,
        "q",
        selector=ready_job,
        claim=lambda draft, job: draft["jobs"].remove(job),
        step_id=StoreStepId(execution_id, "take-0"),
    )
    harness.client.remove_waiters(execution_id, "take-0")
    return result


def test_a_change_wakes_the_first_of_a_cohort_only(harness: Any, define: Any) -> None:
    d = define(initial=lambda id: {"jobs": []})
    for k in range(5):
        wait_in(harness, d, f"t{k}")
    push(harness, d, 1)
    assert woken(harness) == ["t0"], "one wake for the cohort, the first registered"
    push(harness, d, 2)
    assert woken(harness) == ["t0", "t1"], "each change wakes the next not yet woken"


def test_a_claim_wakes_the_next_of_the_cohort_and_its_removal_nobody(
    harness: Any, define: Any
) -> None:
    """Items one at a time: each costs the taker that claims it and the next one, which
    finds nothing and registers again (two resumes an item, whatever the number of takers)."""
    d = define(initial=lambda id: {"jobs": []})
    for k in range(6):
        wait_in(harness, d, f"t{k}")
    for job in range(3):
        push(harness, d, job)
        taker = woken(harness)[-1]
        assert claim(harness, d, taker).selected == job
        nxt = woken(harness)[-1]
        assert nxt != taker, "the claim's commit woke the next of the cohort"
        wait_in(harness, d, nxt)  # it ran, found nothing: registers again, current
    assert woken(harness) == ["t0", "t1", "t1", "t2", "t2", "t3"]


def test_a_woken_waiter_removed_before_its_step_hands_its_wake_on(
    harness: Any, define: Any
) -> None:
    """The execution of the woken taker is cancelled before it checked: the next of its
    cohort is woken in its place, so the item is not left with every taker asleep."""
    d = define(initial=lambda id: {"jobs": []})
    for k in range(3):
        wait_in(harness, d, f"t{k}")
    push(harness, d, 1)
    assert woken(harness) == ["t0"]
    harness.client.remove_waiters("t0")
    assert woken(harness) == ["t0", "t1"]
    assert claim(harness, d, "t1").selected == 1


def test_an_unwoken_waiter_removed_wakes_nobody(harness: Any, define: Any) -> None:
    d = define(initial=lambda id: {"jobs": []})
    for k in range(3):
        wait_in(harness, d, f"t{k}")
    harness.client.remove_waiters("t1")
    assert woken(harness) == []
    push(harness, d, 1)
    assert woken(harness) == ["t0"]


def test_waiters_alone_and_of_other_cohorts_are_woken_as_before(harness: Any, define: Any) -> None:
    d = define(initial=lambda id: {"jobs": []})
    for execution, cohort in [("a0", "a"), ("n0", None), ("b0", "b"), ("a1", "a"), ("n1", None)]:
        wait_in(harness, d, execution, cohort)
    push(harness, d, 1)
    assert woken(harness) == ["a0", "n0", "b0", "n1"]


def test_a_stale_registration_in_a_cohort_is_woken_at_once(harness: Any, define: Any) -> None:
    """A taker of the cohort that checked an older version than the store's registers
    woken: the change since is checked again, whoever else was woken for it."""
    d = define(initial=lambda id: {"jobs": []})
    wait_in(harness, d, "t0")
    missed = harness.client.take_from_store(d, "q", selector=ready_job, claim=None)
    push(harness, d, 1)  # wakes t0
    harness.client.register_waiter(
        StoreWaiter(
            "wf", "t1", "take-0", d.name, "q", missed.instance_id, missed.version,
            missed.read_paths, "jobs",
        )
    )  # fmt: skip
    assert woken(harness) == ["t0", "t1"]


def test_a_registered_cohort_is_listed(harness: Any, define: Any) -> None:
    d = define(initial=lambda id: {"jobs": []})
    wait_in(harness, d, "t0")
    wait_in(harness, d, "t1", None)
    assert [w.cohort for w in harness.waiters(d, "q")] == ["jobs", None]


def closed(state: Any) -> Any:
    """A selector every taker matches once the queue is closed (its claim changes nothing)."""
    return {"closed": True} if state["closed"] else None


def test_a_match_that_changes_nothing_wakes_the_next_of_the_cohort(
    harness: Any, define: Any
) -> None:
    """Closing the queue: every taker's selector matches the same state, and a claim of the
    marker changes nothing, so no change wakes the others. The commit recording the woken
    taker's match wakes the next of its cohort, which matches and wakes the next."""
    d = define(initial=lambda id: {"jobs": [], "closed": False})
    for k in range(3):
        wait_in(harness, d, f"t{k}", selector=closed)
    harness.client.update_store(d, "q", updater=lambda s: s.update(closed=True))
    assert woken(harness) == ["t0"]
    for k in range(3):
        taker = f"t{k}"
        result = harness.client.take_from_store(
            d,
            "q",
            selector=closed,
            claim=lambda draft, marker: None,
            step_id=StoreStepId(taker, "take-0"),
        )
        assert result.matched and result.selected == {"closed": True}
        harness.client.remove_waiters(taker, "take-0")
    assert woken(harness) == ["t0", "t1", "t2"]


def test_a_bad_cohort_is_refused_before_anything_is_stored(harness: Any, define: Any) -> None:
    import pytest

    from yieldstar_django.core.errors import StoreKeyError

    d = define(initial=lambda id: {"jobs": []})
    missed = harness.client.take_from_store(d, "q", selector=ready_job, claim=None)
    for bad in ["", "c" * 65, "a\x00b", 7]:
        waiter = StoreWaiter(
            "wf", "t0", "take-0", d.name, "q", missed.instance_id, missed.version,
            missed.read_paths, bad,
        )  # fmt: skip
        with pytest.raises(StoreKeyError):
            harness.client.register_waiter(waiter)
    assert harness.waiters(d, "q") == []
    assert woken(harness) == []
