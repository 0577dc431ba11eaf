"""Path tracking: tracked drafts, read views, the diff fallback and intersection."""

from __future__ import annotations

import copy
import json
import pickle
from typing import Any

import pytest

from yieldstar_django.connector.statements import (
    PROBES_PER_STATEMENT,
    matching_waiters_sql,
    matching_waiters_statements,
)
from yieldstar_django.core.drafts import TrackedDict, TrackedList, WriteLog, build_draft
from yieldstar_django.core.paths import (
    changes_root,
    collapse_paths,
    diff_paths,
    paths_intersect,
    wakes_waiter,
)
from yieldstar_django.core.selectors import SelectorMutationError, track_selector, unwrap_selected
from yieldstar_django.core.waiter_index import path_match


def draft_of(state: Any) -> tuple[Any, WriteLog]:
    log = WriteLog()
    return build_draft(copy.deepcopy(state), log), log


STATE = {"d": {"a": 1, "b": 2}, "l": [10, 20, 30], "n": [{"x": 1}]}


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda s: s["d"].__setitem__("a", 5), [("d", "a")]),
        (lambda s: s["d"].__delitem__("a"), [("d", "a")]),
        (lambda s: s["d"].pop("b"), [("d", "b")]),
        (lambda s: s["d"].pop("zz", None), []),
        (lambda s: s["d"].popitem(), [("d", "b")]),
        (lambda s: s["d"].setdefault("c", 3), [("d", "c")]),
        (lambda s: s["d"].setdefault("a", 3), []),
        (lambda s: s["d"].update({"a": 0}, c=1), [("d", "a"), ("d", "c")]),
        (lambda s: s["d"].__ior__({"e": 1}), [("d", "e")]),
        (lambda s: s["d"].clear(), [("d",)]),
        (lambda s: s["l"].__setitem__(1, 0), [("l", 1)]),
        (lambda s: s["l"].__setitem__(-1, 0), [("l", 2)]),
        (lambda s: s["l"].__setitem__(slice(0, 1), [7, 8]), [("l",)]),
        (lambda s: s["l"].__delitem__(-1), [("l", 2)]),
        (lambda s: s["l"].__delitem__(0), [("l",)]),
        (lambda s: s["l"].append(4), [("l", 3)]),
        (lambda s: s["l"].extend([4, 5]), [("l", 3), ("l", 4)]),
        (lambda s: s["l"].__iadd__([4]), [("l", 3)]),
        (lambda s: s["l"].insert(99, 4), [("l", 3)]),
        (lambda s: s["l"].insert(0, 4), [("l",)]),
        (lambda s: s["l"].insert(-1, 4), [("l",)]),
        (lambda s: s["l"].pop(), [("l", 2)]),
        (lambda s: s["l"].pop(0), [("l",)]),
        (lambda s: s["l"].remove(20), [("l",)]),
        (lambda s: s["l"].sort(reverse=True), [("l",)]),
        (lambda s: s["l"].reverse(), [("l",)]),
        (lambda s: s["l"].__imul__(2), [("l",)]),
        (lambda s: s["l"].clear(), [("l",)]),
        (lambda s: s["n"][0].__setitem__("x", 2), [("n", 0, "x")]),
        (lambda s: s.__setitem__("new", {"deep": 1}), [("new",)]),
    ],
)
def test_each_in_place_method_records_its_paths(mutate: Any, expected: list[Any]) -> None:
    draft, log = draft_of(STATE)
    mutate(draft)
    assert sorted(log.paths(), key=repr) == sorted(expected, key=repr)
    # Whatever was recorded covers what actually changed.
    for changed in diff_paths(STATE, json.loads(json.dumps(draft))):
        assert any(changed[: len(p)] == p for p in log.paths()), changed


def test_failed_operations_record_nothing() -> None:
    draft, log = draft_of(STATE)
    with pytest.raises(KeyError):
        del draft["d"]["missing"]
    with pytest.raises(IndexError):
        draft["l"][10] = 1
    with pytest.raises(ValueError):
        draft["l"].remove(999)
    assert log.paths() == []


def test_draft_nodes_are_dicts_and_lists_and_copy_out_plainly() -> None:
    draft, _ = draft_of(STATE)
    assert isinstance(draft, dict) and isinstance(draft["l"], list)
    assert type(draft["d"]) is TrackedDict and type(draft["n"]) is TrackedList
    assert json.loads(json.dumps(draft)) == STATE
    assert type(copy.deepcopy(draft)) is dict
    assert type(copy.deepcopy(draft)["l"]) is list
    assert pickle.loads(pickle.dumps(draft)) == STATE
    assert type(draft.copy()) is dict


def test_assigned_values_are_stored_as_given() -> None:
    draft, log = draft_of(STATE)
    value = {"k": object()}
    draft["v"] = value
    assert draft["v"] is value
    assert log.paths() == [("v",)]


def test_moved_nodes_stay_covered() -> None:
    draft, log = draft_of(STATE)
    moved = draft["n"][0]
    draft["other"] = moved
    moved["x"] = 99  # changes both "n"/0/x and "other"/x
    final = json.loads(json.dumps(draft))
    for changed in diff_paths(STATE, final):
        assert paths_intersect([changed], log.paths()), changed


def test_a_repeated_list_shares_its_elements_as_a_plain_list_does() -> None:
    """``*=`` repeats references: a change made through one copy shows at every copy, in a
    draft as in a plain list, also for elements no read reached before."""
    state = {"rows": [{"seen": False}, [0]]}
    plain = copy.deepcopy(state)
    draft, log = draft_of(state)
    for target in (plain, draft):
        target["rows"] *= 2
        target["rows"][0]["seen"] = True
        target["rows"][3].append(1)
    assert plain == {"rows": [{"seen": True}, [0, 1], {"seen": True}, [0, 1]]}
    assert json.loads(json.dumps(draft)) == plain
    assert log.paths() == [("rows",)]


def test_selector_reads_are_recorded_precisely() -> None:
    state = {"a": {"b": {"c": 1}, "z": 0}, "l": [1, 2, 3], "m": {}}
    _, reads = track_selector(state, lambda s: s["a"]["b"]["c"])
    assert reads == [("a", "b", "c")]
    _, reads = track_selector(state, lambda s: s["a"])
    assert reads == [("a",)]
    _, reads = track_selector(state, lambda s: s["l"][-1])
    assert reads == [("l",)]
    _, reads = track_selector(state, lambda s: s["l"][1])
    assert reads == [("l", 1)]
    _, reads = track_selector(state, lambda s: s.get("missing"))
    assert reads == [("missing",)]
    _, reads = track_selector(state, lambda s: len(s["m"]) or "k" in s["a"] or None)
    assert sorted(reads) == [("a",), ("m",)]
    _, reads = track_selector(state, lambda s: [x for x in s["l"]])
    assert reads == [("l",)]
    _, reads = track_selector(state, lambda s: len(s))
    assert reads == [()]
    _, reads = track_selector(5, lambda s: s > 3)
    assert reads == [()]


def test_views_refuse_every_mutation() -> None:
    state = {"a": {"b": 1}, "l": [1]}
    attempts = [
        lambda s: s.__setitem__("x", 1),
        lambda s: s.__delitem__("a"),
        lambda s: s.pop("a"),
        lambda s: s.update(x=1),
        lambda s: s.setdefault("x", 1),
        lambda s: s.clear(),
        lambda s: s["a"].__setitem__("b", 2),
        lambda s: s["l"].append(2),
        lambda s: s["l"].__setitem__(0, 2),
        lambda s: s["l"].sort(),
        lambda s: setattr(s, "x", 1),
    ]
    for attempt in attempts:
        with pytest.raises(SelectorMutationError):
            track_selector(state, attempt)
    assert state == {"a": {"b": 1}, "l": [1]}


def test_unwrap_selected_returns_draft_nodes() -> None:
    draft, _log = draft_of({"jobs": [{"id": 1}, {"id": 2}]})
    found, _ = track_selector(draft, lambda s: s["jobs"][1])
    node = unwrap_selected(found)
    assert node is draft["jobs"][1]
    found, _ = track_selector(draft, lambda s: {"picked": [j for j in s["jobs"]]})
    plain = unwrap_selected(found)
    assert plain["picked"][0] is draft["jobs"][0]


def test_diff_paths() -> None:
    assert sorted(diff_paths({"a": 1, "b": [1, 2]}, {"a": 1, "b": [1, 3, 4]})) == [
        ("b", 1),
        ("b", 2),
    ]
    assert diff_paths({"a": 1}, {"a": 1.0}) == [("a",)]
    assert diff_paths({"a": True}, {"a": 1}) == [("a",)]
    assert diff_paths({"a": 0.0}, {"a": -0.0}) == [("a",)]
    assert diff_paths({"a": {"x": 1}}, {"a": [1]}) == [("a",)]
    assert diff_paths(1, 2) == [()]
    assert diff_paths({"a": 1}, {"a": 1}) == []


def test_collapse_and_intersection() -> None:
    assert collapse_paths([("a", 1), ("a",), ("b",), ("a",)]) == [("a",), ("b",)]
    assert paths_intersect([("a",)], [("a", 1, "x")])
    assert paths_intersect([("a", 1, "x")], [("a",)])
    assert paths_intersect([()], [("z",)])
    assert paths_intersect([("z",)], [()])
    assert not paths_intersect([("a", 1)], [("a", 2)])
    assert not paths_intersect([("a",)], [])
    assert not paths_intersect([("1",)], [(1,)])


def test_drafts_adopt_lazily() -> None:
    state = {"count": 0, "items": [{"id": i} for i in range(1000)]}
    draft, log = draft_of(state)
    draft["count"] = 1
    assert type(dict.__getitem__(draft, "items")) is list, "untouched containers stay plain"
    item = draft["items"][5]
    assert type(item) is TrackedDict
    assert type(list.__getitem__(dict.__getitem__(draft, "items"), 6)) is dict
    item["id"] = -5
    assert log.paths() == [("count",), ("items", 5, "id")]


def test_placed_containers_keep_their_identity() -> None:
    draft, log = draft_of({"a": {}})
    mine = {"x": [1]}
    draft["b"] = mine
    assert draft["b"] is mine
    assert draft.get("b") is mine
    assert next(v for k, v in draft.items() if k == "b") is mine
    mine["x"].append(2)
    assert draft["b"]["x"] == [1, 2]
    assert log.paths() == [("b",)]


def test_wake_rule_wakes_on_a_root_change_whatever_was_read() -> None:
    assert wakes_waiter([], [()])
    assert wakes_waiter([("a",)], [("b",), ()])
    assert wakes_waiter([("a",)], [("a", 1)])
    assert not wakes_waiter([], [("a",)])
    assert not wakes_waiter([("a",)], [("b",)])
    assert not wakes_waiter([()], [])
    assert changes_root([("a",), ()]) and not changes_root([("a",)])
    for changed in ([()], [("a",)], [("a", 1), ("b",)]):
        assert path_match(changed).wake_all == changes_root(changed)


@pytest.mark.parametrize("changed", [0, 1, 124, 125, 249, 250, 1000])
def test_the_matching_statements_probe_every_key_once_in_bounded_statements(
    changed: int,
) -> None:
    match = path_match([("f", f"k{i}") for i in range(changed)])
    statements = matching_waiters_statements(7, match)
    probes = [query.count("SELECT waiter_id") for query, _ in statements]
    assert all(0 < n <= PROBES_PER_STATEMENT for n in probes), probes
    assert sum(probes) == 1 + len(match.read_keys) + len(match.prefix_keys)
    assert sum("kind = 2" in query for query, _ in statements) == 1
    keys = [p for _, params in statements for p in params if isinstance(p, str)]
    assert sorted(keys) == sorted(match.read_keys + match.prefix_keys)
    if sum(probes) <= PROBES_PER_STATEMENT:
        assert statements == [matching_waiters_sql(7, match)]


def test_comparing_two_parts_of_the_state_records_both() -> None:
    """``==``, ``in``, ``index()`` and ``count()`` between two views read both containers
    whole (docs/concepts/waiters.md: ``==`` and ``in`` are structural reads): a change
    anywhere in either can change the answer, even when the selector also read a field of
    one of them (which alone would let the container's own path be dropped)."""
    state = {"a": {"v": 1, "ok": True}, "b": {"v": 2, "ok": True}, "l": [{"v": 2, "ok": True}]}
    selectors = [
        lambda s: (s["b"]["ok"] and s["a"] == s["b"]) or None,
        lambda s: (s["b"]["ok"] and s["b"] == s["a"]) or None,
        lambda s: s["b"]["ok"] and s["a"] != s["b"] and None,
        lambda s: (s["b"]["ok"] and s["b"] in s["l"]) or None,
        lambda s: (s["b"]["ok"] and s["l"].count(s["b"])) or None,
        lambda s: s["b"]["ok"] and s["b"] in list(s.values()) and None,
    ]
    for selector in selectors:
        _, reads = track_selector(state, selector)
        assert paths_intersect(reads, [("b", "v")]), reads
    _, reads = track_selector(state, lambda s: s["b"]["ok"] and s["l"].index(s["b"]))
    assert paths_intersect(reads, [("b", "v")]), reads


def test_deep_copying_a_view_records_what_it_copies() -> None:
    """A selector that works on ``copy.deepcopy(state)`` (or a pickled copy) read all of
    it: its reads must not come out empty."""
    state = {"jobs": [], "other": 1}

    def deep(s: Any) -> Any:
        c = copy.deepcopy(s)
        return c["jobs"][0] if c["jobs"] else None

    def pickled(s: Any) -> Any:
        c = pickle.loads(pickle.dumps(s["jobs"]))
        return c[0] if c else None

    for selector in (deep, pickled):
        found, reads = track_selector(state, selector)
        assert found is None
        assert paths_intersect(reads, [("jobs", 0)]), reads
    copied, _ = track_selector(state, lambda s: copy.deepcopy(s["jobs"]))
    assert copied == [] and type(copied) is list
    with pytest.raises(SelectorMutationError):
        track_selector(state, lambda s: copy.copy(s["jobs"]).append(1))
    assert state == {"jobs": [], "other": 1}


def test_a_sort_that_fails_midway_records_the_list() -> None:
    """``list.sort`` can reorder the list before a comparison fails; an updater that
    catches the error commits that order, so the list's path must be recorded."""
    draft, log = draft_of({"l": [3, 1, 2, "a"]})
    with pytest.raises(TypeError):
        draft["l"].sort()
    assert list(draft["l"]) != [3, 1, 2, "a"], "CPython left the list partly sorted"
    assert log.paths() == [("l",)]
