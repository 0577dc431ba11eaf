"""A selector's read-only views answer ``isinstance`` as the ``dict``/``list`` they stand for.

The common idiom ``s["jobs"][0] if isinstance(s["jobs"], list) and s["jobs"] else None``
must match once a job is there; before, the views were only a ``Mapping``/``Sequence``, so
it said "nothing" forever (a wake lost without an error). Everything else about the views
stays: every read is recorded, every change is refused, and what relies on a view *not*
being a plain container (durability, unwrapping, JSON, copies, comparisons) behaves as
before.
"""

from __future__ import annotations

import collections
import copy
import json
import operator
import pickle
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from django.core.serializers.json import DjangoJSONEncoder

from yieldstar_django.core.changes import PathLink
from yieldstar_django.core.drafts import TrackedDict, TrackedList, WriteLog, build_draft
from yieldstar_django.core.durable import check_durable, encode_durable, encode_placed
from yieldstar_django.core.errors import WorkflowValueError
from yieldstar_django.core.paths import paths_intersect
from yieldstar_django.core.selectors import (
    DictView,
    ListView,
    ReadView,
    SelectorMutationError,
    track_selector,
    unwrap_selected,
    unwrap_view,
)

STATE: dict[str, Any] = {
    "jobs": [{"id": 1, "tags": ["a"]}],
    "config": {"mode": "x"},
    "n": 3,
    "s": "text",
}


def fresh() -> Any:
    return copy.deepcopy(STATE)


def draft() -> Any:
    return build_draft(fresh(), WriteLog())


def views_of(state: Any) -> tuple[Any, Any, Any]:
    """The root view, the ``jobs`` list view and the first job's view, from one run."""
    seen: list[Any] = []
    track_selector(state, lambda s: seen.extend([s, s["jobs"], s["jobs"][0]]))
    return seen[0], seen[1], seen[2]


@pytest.mark.parametrize("make", [fresh, draft], ids=["plain", "draft"])
def test_views_are_instances_of_the_container_they_stand_for(make: Any) -> None:
    root, jobs, job = views_of(make())
    for view in (root, job):
        assert type(view) is DictView
        assert isinstance(view, dict)
        assert not isinstance(view, list)
        assert isinstance(view, Mapping)
    assert type(jobs) is ListView
    assert isinstance(jobs, list)
    assert not isinstance(jobs, dict)
    assert isinstance(jobs, Sequence)
    for view in (root, jobs, job):
        assert isinstance(view, ReadView)
        assert isinstance(view, (dict, list))
        # Nothing else: a view is no scalar, string, tuple or set.
        for other in (str, bytes, int, float, bool, tuple, set, frozenset, type(None)):
            assert not isinstance(view, other), other
        assert not isinstance(view, (str, int))
        # Nor the draft's own node classes, or the ordered or default dicts.
        assert not isinstance(view, (TrackedDict, TrackedList))
        assert not isinstance(view, (collections.OrderedDict, collections.defaultdict))


def test_the_isinstance_idiom_matches_and_records_the_reads_that_wake_it() -> None:
    """The idiom from the issue: no match on an empty list, reading what a job arriving
    changes; a match once there is one."""

    def first_job(s: Any) -> Any:
        if not isinstance(s, dict):
            return None
        jobs = s["jobs"]
        return jobs[0] if isinstance(jobs, list) and jobs else None

    found, reads = track_selector({"jobs": [], "other": 1}, first_job)
    assert found is None
    assert paths_intersect(reads, [("jobs", 0)]), reads
    assert not paths_intersect(reads, [("other",)]), reads
    found, _ = track_selector(draft(), first_job)
    assert unwrap_selected(found) == {"id": 1, "tags": ["a"]}

    def job_dicts(s: Any) -> Any:
        return [j for j in s["jobs"] if isinstance(j, dict)] or None

    found, _ = track_selector(fresh(), job_dicts)
    assert unwrap_selected(found) == [{"id": 1, "tags": ["a"]}]


def test_isinstance_reads_what_stepping_into_the_container_reads() -> None:
    """Testing a container's type observes that a container is there, which only a write
    at its path or above can change (a replacement by a scalar or another container)."""
    _, reads = track_selector(fresh(), lambda s: isinstance(s["config"], dict) or None)
    assert reads == [("config",)]
    _, reads = track_selector(fresh(), lambda s: isinstance(s["n"], dict) or None)
    assert reads == [("n",)]
    _, reads = track_selector(
        fresh(), lambda s: (isinstance(s["config"], dict) and s["config"]["mode"]) or None
    )
    assert reads == [("config", "mode")]
    assert paths_intersect(reads, [("config",)]), "a replacement of the container wakes it"


def test_views_still_refuse_every_change() -> None:
    state = fresh()
    attempts = [
        lambda s: s.__setitem__("x", 1),
        lambda s: s.__delitem__("n"),
        lambda s: s.pop("n"),
        lambda s: s.popitem(),
        lambda s: s.update(x=1),
        lambda s: s.setdefault("x", 1),
        lambda s: s.clear(),
        lambda s: s["config"].__setitem__("mode", "y"),
        lambda s: s["jobs"].append(2),
        lambda s: s["jobs"].extend([2]),
        lambda s: s["jobs"].insert(0, 2),
        lambda s: s["jobs"].pop(),
        lambda s: s["jobs"].remove(s["jobs"][0]),
        lambda s: s["jobs"].clear(),
        lambda s: s["jobs"].sort(),
        lambda s: s["jobs"].reverse(),
        lambda s: s["jobs"].__setitem__(0, 2),
        lambda s: s["jobs"].__delitem__(0),
        lambda s: s["jobs"][0]["tags"].append("b"),
        lambda s: setattr(s, "x", 1),
        lambda s: setattr(s, "__class__", list),
        lambda s: setattr(s["jobs"], "__class__", dict),
        lambda s: delattr(s, "_ys_target"),
        lambda s: delattr(s, "__class__"),
    ]
    for attempt in attempts:
        with pytest.raises(SelectorMutationError):
            track_selector(state, attempt)
    # The builtins' own methods do not apply to a view: an error, never a silent write.
    for bypass in (
        lambda s: dict.__setitem__(s, "x", 1),
        lambda s: dict.update(s, x=1),
        lambda s: list.append(s["jobs"], 2),
        lambda s: list.__setitem__(s["jobs"], 0, 2),
    ):
        with pytest.raises(TypeError):
            track_selector(state, bypass)
    assert state == STATE


def test_views_are_not_durable_values() -> None:
    """A view that escapes its selector (kept in a variable, returned from a step) is
    refused by the durability check as before, not taken for a ``dict`` and crashing the
    encoder."""
    root, jobs, job = views_of(fresh())
    for view, name in ((root, "DictView"), (jobs, "ListView"), (job, "DictView")):
        with pytest.raises(WorkflowValueError, match=f"{name} values are not durable"):
            check_durable(view)
        with pytest.raises(WorkflowValueError, match=f"at \\$.x\\[0\\]: {name} values"):
            encode_durable({"x": [view]})
    target = build_draft({"a": 1}, WriteLog())
    with pytest.raises(WorkflowValueError, match="DictView values are not durable"):
        encode_placed(target, [(PathLink.root(), "b", root, True)])


def test_unwrapping_returns_what_the_views_stand_for() -> None:
    state = draft()
    found, _ = track_selector(
        state, lambda s: {"job": s["jobs"][0], "all": [s["jobs"]], "pair": (s["config"], 1)}
    )
    plain = unwrap_selected(found)
    assert type(plain) is dict and type(plain["all"]) is list and type(plain["pair"]) is tuple
    assert plain["job"] is state["jobs"][0]
    assert plain["all"][0] is state["jobs"]
    assert plain["pair"][0] is state["config"]
    root, jobs, _job = views_of(state)
    assert unwrap_selected(root) is state
    assert unwrap_view(jobs) is state["jobs"]
    assert unwrap_view(5) == 5


DUMPS = [
    pytest.param(lambda v: json.dumps(v), id="compact"),
    pytest.param(lambda v: json.dumps(v, indent=2), id="indent"),
    pytest.param(lambda v: json.dumps(v, sort_keys=True), id="sort_keys"),
    pytest.param(lambda v: json.dumps(v, cls=DjangoJSONEncoder), id="django"),
    pytest.param(lambda v: json.dumps({"wrapped": [v]}, indent=1), id="nested"),
]


@pytest.mark.parametrize("dumps", DUMPS)
def test_json_encodes_a_view_right_or_fails_as_before(dumps: Any) -> None:
    """``json`` encodes a view as what it stands for, or refuses it with the same message
    as before; it never writes ``{}`` or ``[]`` for a view that holds something."""
    for pick, name in ((lambda s: s, "DictView"), (lambda s: s["jobs"], "ListView")):
        plain = pick(fresh())
        seen: list[Any] = []

        def selector(s: Any, pick: Any = pick, seen: list[Any] = seen) -> Any:
            seen.append(dumps(pick(s)))
            return None

        try:
            _, reads = track_selector(fresh(), selector)
        except TypeError as exc:
            assert str(exc) == f"Object of type {name} is not JSON serializable"
            continue
        assert seen == [dumps(plain)], "a view encodes as the value it stands for"
        assert paths_intersect(reads, [("jobs", 0, "tags", 0)]), reads


def test_copies_and_pickles_are_plain_and_read_whole() -> None:
    root, jobs, _job = views_of(fresh())
    assert copy.copy(root) is root and copy.copy(jobs) is jobs
    for view, kind in ((root, dict), (jobs, list)):
        for duplicate in (copy.deepcopy(view), pickle.loads(pickle.dumps(view))):
            assert type(duplicate) is kind
            assert duplicate == unwrap_view(view)
    mixed = copy.deepcopy({"view": jobs, "n": [root]})
    assert type(mixed["view"]) is list and type(mixed["n"][0]) is dict
    _, reads = track_selector(fresh(), lambda s: copy.deepcopy(s["jobs"]) and None)
    assert paths_intersect(reads, [("jobs", 0, "id")]), reads


def test_equality_and_comparisons() -> None:
    root, jobs, job = views_of(fresh())
    # Both operand orders: a plain container on the left defers to the view.
    assert root == STATE and operator.eq(STATE, root)
    assert jobs == STATE["jobs"] and operator.eq(STATE["jobs"], jobs)
    assert job != {"id": 2} and operator.ne({"id": 2}, job)
    assert root != jobs and jobs != 5
    assert jobs != tuple(STATE["jobs"]), "a list is not equal to a tuple"
    with pytest.raises(TypeError):
        hash(root)
    with pytest.raises(TypeError):
        hash(jobs)
    # Lists order as lists do, against lists and other list views.
    _, first, _ = views_of({"jobs": [1, 2]})
    _, second, _ = views_of({"jobs": [1, 3]})
    assert first < second and second > first and first <= [1, 2] and operator.ge([1, 2], first)
    assert sorted([second, first]) == [[1, 2], [1, 3]]
    with pytest.raises(TypeError):
        _ = first < (1, 2)
    with pytest.raises(TypeError):
        _ = root < root  # dicts do not order
    _, reads = track_selector({"a": [1, [2]], "b": [1, [3]]}, lambda s: s["a"] < s["b"])
    assert sorted(reads) == [("a",), ("b",)]


def test_drafts_are_dicts_and_lists_for_updaters() -> None:
    """An updater's draft is made of ``dict``/``list`` subclasses: the same idiom works
    there, and writes through it are recorded."""
    log = WriteLog()
    state = build_draft(fresh(), log)
    assert isinstance(state, dict) and isinstance(state["jobs"], list)
    assert isinstance(state["jobs"][0], dict) and isinstance(state["config"], dict)
    if isinstance(state["jobs"], list):
        state["jobs"].append({"id": 2})
    assert log.paths() == [("jobs", 1)]
