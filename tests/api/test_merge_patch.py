"""RFC 7396 JSON Merge Patch: the RFC's Appendix A table, then in-place behaviour."""

from __future__ import annotations

from typing import Any

import pytest

from yieldstar_django.api.merge_patch import apply_merge_patch

APPENDIX_A: list[tuple[Any, Any, Any]] = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize(("target", "patch", "expected"), APPENDIX_A)
def test_rfc_7396_appendix_a(target: Any, patch: Any, expected: Any) -> None:
    before = repr(target)
    assert apply_merge_patch(target, patch) == expected
    assert repr(target) == before


def test_in_place_keeps_untouched_members() -> None:
    inner = {"keep": [1], "x": 1}
    target = {"inner": inner, "other": {"y": 2}}
    result = apply_merge_patch(target, {"inner": {"x": 2}}, in_place=True)
    assert result is target
    assert target["inner"] is inner  # merged into, not replaced
    assert inner == {"keep": [1], "x": 2}


def test_patch_values_are_copied() -> None:
    patch = {"a": {"list": [1]}, "b": [{"c": 1}]}
    first = apply_merge_patch({}, patch)
    first["a"]["list"].append(2)
    first["b"][0]["c"] = 9
    assert patch == {"a": {"list": [1]}, "b": [{"c": 1}]}


def test_deep_patch_is_iterative() -> None:
    patch: Any = {}
    node = patch
    for _ in range(5000):
        node["k"] = {}
        node = node["k"]
    result = apply_merge_patch({}, patch)
    depth = 0
    while result:
        result = result["k"]
        depth += 1
    assert depth == 5000
