"""Schemas and durable values: bad states raise typed errors and change nothing.

See docs/concepts/stores.md.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from yieldstar_django import StoreValidationError, WorkflowValueError


def positive_count(state: Any) -> None:
    if state["count"] < 0:
        raise ValueError("count must not be negative")


def assert_unchanged(harness: Any, d: Any, id: str, before: Any) -> None:
    after = harness.client.get_store(d, id)
    assert after == before


def test_schema_rejection_changes_nothing(harness: Any, define: Any) -> None:
    d = define(schema=positive_count)
    c = harness.client
    before = c.get_store(d, "a")
    with pytest.raises(StoreValidationError) as info:
        c.update_store(d, "a", updater=lambda s: s.update(count=-1))
    assert info.value.issues == [{"message": "count must not be negative", "path": ()}]
    assert "count must not be negative" in str(info.value)
    assert_unchanged(harness, d, "a", before)


def test_invalid_initial_state_creates_nothing(harness: Any, define: Any) -> None:
    d = define(initial=lambda id: {"items": [], "count": -5}, schema=positive_count)
    with pytest.raises(StoreValidationError):
        harness.client.get_store(d, "a")
    with pytest.raises(StoreValidationError):
        harness.client.take_from_store(d, "a", selector=lambda s: None, claim=None)
    assert harness.client.list_stores(d) == []


def test_schema_output_is_the_state(harness: Any, define: Any) -> None:
    def with_defaults(state: Any) -> Any:
        return {"tags": [], **state}

    d = define(initial=lambda id: {"count": 0}, schema=with_defaults)
    c = harness.client
    assert c.get_store(d, "a").state == {"count": 0, "tags": []}
    result = c.update_store(d, "a", updater=lambda s: s.update(count=1))
    assert result.state == {"count": 1, "tags": []}
    assert harness.changed_paths(d, "a")[-1] == (("count",),)


BAD_VALUES: list[tuple[str, Any]] = [
    ("nan", math.nan),
    ("inf", math.inf),
    ("set", {1, 2}),
    ("bytes", b"x"),
    ("object", object()),
    ("nul", "a\x00b"),
    ("surrogate", "\ud800"),
    ("int key", {1: "x"}),
    ("nul key", {"a\x00": 1}),
    ("int of 4301 digits", 10**4300),
    ("negative int of 5000 digits", -(10**4999)),
]


@pytest.mark.parametrize(("label", "value"), BAD_VALUES, ids=[b[0] for b in BAD_VALUES])
def test_non_durable_values_are_rejected_before_any_write(
    harness: Any, define: Any, label: str, value: Any
) -> None:
    d = define()
    c = harness.client
    before = c.get_store(d, "a")
    with pytest.raises(WorkflowValueError) as info:
        c.update_store(d, "a", updater=lambda s: s["items"].append({"bad": value}))
    assert info.value.code == "INVALID_STEP_VALUE"
    assert info.value.path[:3] == ("items", 0, "bad")
    assert_unchanged(harness, d, "a", before)


def test_cycle_deep_nesting_and_oversize_are_clean_errors(harness: Any, define: Any) -> None:
    d = define()
    c = harness.client
    before = c.get_store(d, "a")

    def cycle(draft: Any) -> None:
        draft["self"] = draft

    def deep(draft: Any) -> None:
        node: list[Any] = []
        draft["deep"] = node
        for _ in range(100_000):
            node.append([])
            node = node[0]

    def large(draft: Any) -> None:
        draft["blob"] = "x" * 5000

    with pytest.raises(WorkflowValueError, match="cycle"):
        c.update_store(d, "a", updater=cycle)
    with pytest.raises(WorkflowValueError, match="deeper than"):
        c.update_store(d, "a", updater=deep)
    with (
        harness.configure(MAX_STATE_BYTES=4096),
        pytest.raises(WorkflowValueError, match="larger than"),
    ):
        c.update_store(d, "a", updater=large)
    with harness.configure(MAX_DEPTH=3), pytest.raises(WorkflowValueError, match="deeper than 3"):
        c.update_store(d, "a", updater=lambda s: s.update(x={"y": {"z": {}}}))
    assert_unchanged(harness, d, "a", before)


def test_a_state_of_too_many_values_changes_nothing(harness: Any, define: Any) -> None:
    """``MAX_STATE_NODES`` bounds a replacement, a state grown in place a little at a time,
    and a take's claim; a state at the limit is stored."""
    d = define(initial=lambda id: {"jobs": []})
    c = harness.client
    before = c.get_store(d, "a")
    too_many = "more than the limit of 1000 values"
    with harness.configure(MAX_STATE_NODES=1000):
        with pytest.raises(WorkflowValueError, match=too_many):
            c.update_store(d, "a", updater=lambda s: {"jobs": [[]] * 999})  # 1,001 values
        with pytest.raises(WorkflowValueError, match=too_many):
            c.update_store(d, "a", updater=lambda s: s["jobs"].extend([0] * 999))
        with pytest.raises(WorkflowValueError, match=too_many):
            c.take_from_store(
                d, "a", selector=lambda s: True, claim=lambda s, _: s.update(more=[{}] * 998)
            )
    assert_unchanged(harness, d, "a", before)
    with harness.configure(MAX_STATE_NODES=1000):
        c.update_store(d, "a", updater=lambda s: {"jobs": [[]] * 998})
        assert len(c.get_store(d, "a").state["jobs"]) == 998


def test_non_durable_selection_leaves_the_store_unchanged(harness: Any, define: Any) -> None:
    d = define(initial=lambda id: {"jobs": [1]})
    c = harness.client
    before = c.get_store(d, "q")
    with pytest.raises(WorkflowValueError, match="selection"):
        c.take_from_store(
            d, "q", selector=lambda s: {"job": s["jobs"][0], "at": object()}, claim=None
        )
    assert_unchanged(harness, d, "q", before)


@pytest.mark.parametrize(
    "value",
    [
        1e20,
        2**70,
        1e300,
        -0.0,
        0.1,
        5e-324,
        1.7976931348623157e308,
        -(2**63),
        "é😀\u2028",
        True,
        None,
    ],
)
def test_numbers_and_strings_read_back_unchanged(harness: Any, define: Any, value: Any) -> None:
    d = define()
    c = harness.client
    c.update_store(d, "n", updater=lambda s: s.update(value=value))
    stored = c.get_store(d, "n").state["value"]
    assert type(stored) is type(value)
    assert repr(stored) == repr(value)


def test_tuples_read_back_as_lists(harness: Any, define: Any) -> None:
    d = define()
    c = harness.client
    c.update_store(d, "t", updater=lambda s: s.update(pair=(1, (2, 3))))
    assert c.get_store(d, "t").state["pair"] == [1, [2, 3]]


def test_integers_over_4300_digits_are_invalid_step_values(harness: Any, define: Any) -> None:
    """A ``json.dumps`` ValueError before; now the typed error naming the path, everywhere
    a value enters: updater drafts, whole returned states, selections and ``initial``."""
    d = define()
    c = harness.client
    before = c.get_store(d, "a")
    with pytest.raises(WorkflowValueError) as info:
        c.update_store(d, "a", updater=lambda s: s.update(count=10**4300))
    assert (info.value.code, info.value.path) == ("INVALID_STEP_VALUE", ("count",))
    assert "4300 digits" in str(info.value)
    with pytest.raises(WorkflowValueError) as info:
        c.update_store(d, "a", updater=lambda s: {"items": [], "count": 0, "n": [-(10**5000)]})
    assert info.value.path == ("n", 0)
    with pytest.raises(WorkflowValueError) as info:
        c.take_from_store(d, "a", selector=lambda s: {"big": 7**6000}, claim=None)
    assert info.value.path == ("big",)
    assert_unchanged(harness, d, "a", before)
    huge = define(initial=lambda id: {"n": 10**4300})
    with pytest.raises(WorkflowValueError):
        c.get_store(huge, "x")
    assert c.list_stores(huge) == []
    # The largest durable integers round-trip exactly.
    edge = 10**4300 - 1
    assert c.update_store(d, "a", updater=lambda s: s.update(count=-edge)).state["count"] == -edge
    assert c.get_store(d, "a").state["count"] == -edge
