"""The cohort of a selector: equal only for the same function of the state."""

from __future__ import annotations

import functools
from typing import Any

from yieldstar_django.core.cohorts import cohort_wakes, first_of_each_cohort, selector_cohort


def first_job(state: Any) -> Any:
    return state["jobs"][0] if state["jobs"] else None


def first_job_too(state: Any) -> Any:
    return state["jobs"][0] if state["jobs"] else None


def for_customer(customer: Any) -> Any:
    return lambda state: state["jobs"].get(customer)


def helper(state: Any) -> Any:
    return state["jobs"]


def through_helper(state: Any) -> Any:
    return helper(state)[0]


def by_key(key: str, state: Any) -> Any:
    return state.get(key)


class Picker:
    def pick(self, state: Any) -> Any:
        return state


def test_the_same_function_is_one_cohort_and_another_is_not() -> None:
    assert selector_cohort(first_job) == selector_cohort(first_job)
    assert selector_cohort(first_job) != selector_cohort(first_job_too), "another function"
    assert len(selector_cohort(first_job) or "") == 32


def test_captured_values_decide() -> None:
    assert selector_cohort(for_customer("a")) == selector_cohort(for_customer("a"))
    assert selector_cohort(for_customer("a")) != selector_cohort(for_customer("b"))
    assert selector_cohort(for_customer(1)) != selector_cohort(for_customer("1"))
    assert selector_cohort(for_customer([1, {"x": (2, None)}])) == selector_cohort(
        for_customer([1, {"x": (2, None)}])
    )
    assert selector_cohort(functools.partial(by_key, "a")) == selector_cohort(
        functools.partial(by_key, "a")
    )
    assert selector_cohort(functools.partial(by_key, "a")) != selector_cohort(
        functools.partial(by_key, "b")
    )


def test_what_cannot_be_compared_has_no_cohort() -> None:
    assert selector_cohort(for_customer(object())) is None
    assert selector_cohort(for_customer({1, 2})) is None, "a set's order varies by process"
    assert selector_cohort(Picker().pick) is None
    assert selector_cohort(len) is None
    assert selector_cohort(functools.partial(by_key, object())) is None


def test_the_module_functions_a_selector_calls_are_part_of_it(monkeypatch: Any) -> None:
    before = selector_cohort(through_helper)
    monkeypatch.setitem(through_helper.__globals__, "helper", lambda state: state["other"])
    assert selector_cohort(through_helper) != before


def test_a_recursive_selector_has_a_cohort() -> None:
    def walk(state: Any) -> Any:
        return walk(state[0]) if isinstance(state, list) else state

    assert selector_cohort(walk) is not None


def test_each_cohort_wakes_its_first_member_not_held_elsewhere() -> None:
    waiters = [("a0", "a"), ("n0", None), ("a1", "a"), ("b0", "b"), ("n1", None)]
    alone, cohorts = first_of_each_cohort(waiters, lambda w: w[1])
    assert alone == [("n0", None), ("n1", None)]
    assert cohorts == {"a": [("a0", "a"), ("a1", "a")], "b": [("b0", "b")]}
    held = {"a0"}
    assert cohort_wakes(cohorts["a"], lambda w: w[0] not in held) == [("a0", "a"), ("a1", "a")]
    assert cohort_wakes(cohorts["a"], lambda w: True) == [("a0", "a")]
