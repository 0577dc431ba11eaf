"""Bounded changed paths (``core.changes``): a cut in depth or in index keys records
prefixes of the changed paths, so no wake is lost, and it keeps within its budget."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import HealthCheck, given, settings, strategies as st

from yieldstar_django.core.changes import ChangedPaths
from yieldstar_django.core.constants import MAX_CHANGE_KEYS, MAX_CHANGED_PATH_DEPTH
from yieldstar_django.core.drafts import WriteLog, build_draft
from yieldstar_django.core.paths import diff_paths, wakes_waiter

from .test_properties import apply, states


def key_cost(paths: list[tuple[Any, ...]]) -> int:
    """The index keys the paths are looked up by, as ``ChangedPaths`` counts them."""
    return sum(len(path) + 2 for path in paths)


def assert_covers(bounded: list[tuple[Any, ...]], exact: list[tuple[Any, ...]]) -> None:
    """Every exact path lies at or under a bounded one, so every read path the exact
    change wakes, the bounded one wakes too."""
    for path in exact:
        assert any(path[: len(cover)] == cover for cover in bounded), (path, bounded)
        assert wakes_waiter([path], bounded)


def assert_within(bounded: list[tuple[Any, ...]], budget: int, depth: int) -> None:
    assert all(len(path) <= depth for path in bounded), bounded
    assert bounded == [()] or key_cost(bounded) <= budget, bounded


budgets = st.tuples(st.integers(2, 40), st.integers(0, 4))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(previous=states, current=states, limits=budgets)
def test_a_bounded_diff_covers_the_exact_one(
    previous: Any, current: Any, limits: tuple[int, int]
) -> None:
    budget, depth = limits
    exact = diff_paths(previous, current)
    bounded = diff_paths(previous, current, ChangedPaths(budget, depth))
    assert_covers(bounded, exact)
    assert_within(bounded, budget, depth)
    assert (bounded == []) == (exact == [])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(state=states, data=st.data(), limits=budgets)
def test_bounded_draft_writes_cover_every_change(
    state: Any, data: st.DataObject, limits: tuple[int, int]
) -> None:
    budget, depth = limits
    previous = copy.deepcopy(state)
    log = WriteLog(ChangedPaths(budget, depth))
    draft = build_draft(copy.deepcopy(state), log)
    apply(draft, data)
    written = log.paths()
    assert_covers(written, diff_paths(previous, json.loads(json.dumps(draft))))
    assert_within(written, budget, depth)


def test_a_change_within_the_budget_is_recorded_exactly() -> None:
    previous = {"f": {f"k{i}": i for i in range(5000)}, "deep": [[[[[0]]]]]}
    current = {"f": {f"k{i}": -i for i in range(5000)}, "deep": [[[[[1]]]]]}
    paths = diff_paths(previous, current)
    assert sorted(paths, key=repr) == sorted(
        [("f", f"k{i}") for i in range(1, 5000)] + [("deep", 0, 0, 0, 0, 0)], key=repr
    )


def test_a_deep_change_is_recorded_at_the_depth_cap() -> None:
    def chain(depth: int, leaf: int) -> Any:
        value: Any = leaf
        for _ in range(depth):
            value = [value]
        return value

    (path,) = diff_paths(chain(200, 0), chain(200, 1))
    assert path == (0,) * MAX_CHANGED_PATH_DEPTH


def test_too_many_paths_are_recorded_at_the_deepest_level_that_fits() -> None:
    n = MAX_CHANGE_KEYS  # each ("a", i, "x") costs 5 keys: they cannot all fit
    previous = {"a": [{"x": 0} for _ in range(n)], "b": 0}
    current = {"a": [{"x": 1} for _ in range(n)], "b": 1}
    assert sorted(diff_paths(previous, current), key=repr) == [("a",), ("b",)]
    # Past the budget at every level but the root, the root is recorded: it wakes all.
    assert diff_paths([[0]] * 40_000, [[1]] * 40_000) == [()]
