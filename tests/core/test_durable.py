"""Durable values: rejections name the offending path; encoding is canonical."""

from __future__ import annotations

import json
import math
import tracemalloc
from typing import Any

import pytest
from hypothesis import given, strategies as st

from yieldstar_django.core.drafts import WriteLog, build_draft, detach
from yieldstar_django.core.durable import (
    DurableLimits,
    check_durable,
    clone_durable,
    count_json_values,
    decode_durable,
    encode_durable,
    encode_placed,
)
from yieldstar_django.core.errors import WorkflowValueError


@pytest.mark.parametrize(
    ("value", "path", "reason"),
    [
        ({"a": [1, math.nan]}, ("a", 1), "finite"),
        ({"a": -math.inf}, ("a",), "finite"),
        ({"a": {3: 1}}, ("a",), "keys must be str"),
        ({"a": {1, 2}}, ("a",), "set values"),
        ({"a": b"x"}, ("a",), "bytes values"),
        ({"when": __import__("datetime").date(2026, 1, 1)}, ("when",), "date values"),
        ({"a": ["ok", "bad\x00"]}, ("a", 1), "\\x00"),
        ({"a": "\udc00"}, ("a",), "surrogate"),
        ({"k\x00": 1}, ("k\x00",), "key cannot hold"),
        ({"a": object()}, ("a",), "object values"),
    ],
)
def test_rejections_name_the_path(value: Any, path: tuple[Any, ...], reason: str) -> None:
    with pytest.raises(WorkflowValueError) as info:
        encode_durable(value, step_key="s1", label="Result")
    err = info.value
    assert err.code == "INVALID_STEP_VALUE"
    assert err.step_key == "s1"
    assert err.path == path
    assert reason in str(err)
    assert str(err).startswith("Result is not a durable value")


def test_subclasses_of_scalars_are_not_durable() -> None:
    import enum

    class Color(enum.IntEnum):
        RED = 1

    with pytest.raises(WorkflowValueError, match="Color values"):
        check_durable({"c": Color.RED})


def test_a_dict_subclass_is_checked_as_json_encodes_it() -> None:
    """json encodes a dict subclass through its items(): the check reads the same pairs."""
    from collections import Counter, OrderedDict, defaultdict

    class Exposing(dict[str, Any]):
        def items(self) -> Any:
            return [("hidden", math.nan)]

    class Failing(dict[str, Any]):
        def items(self) -> Any:
            raise RuntimeError("no items")

    with pytest.raises(WorkflowValueError, match="finite") as info:
        encode_durable({"a": Exposing(shown=1)})
    assert info.value.path == ("a", "hidden")

    class Odd(dict[str, Any]):
        def items(self) -> Any:
            return [("a", 1, 2)]

    with pytest.raises(WorkflowValueError, match=r"Failing\.items\(\) raised RuntimeError"):
        encode_durable({"a": Failing(shown=1)})
    with pytest.raises(WorkflowValueError, match="did not return pairs"):
        encode_durable(Odd(a=1))
    ordered = OrderedDict([("b", 1), ("a", 2)])
    for value in (ordered, defaultdict(list, a=[1]), Counter("aab")):
        assert decode_durable(encode_durable(value)) == dict(value)


def test_cycles_are_rejected_but_shared_references_are_fine() -> None:
    shared = {"x": 1}
    assert decode_durable(encode_durable({"a": shared, "b": shared})) == {
        "a": {"x": 1},
        "b": {"x": 1},
    }
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(WorkflowValueError, match="cycle"):
        check_durable(loop)


def test_hundred_thousand_levels_is_a_clean_error() -> None:
    value: Any = 0
    for _ in range(100_000):
        value = [value]
    with pytest.raises(WorkflowValueError, match="deeper than 256"):
        encode_durable(value)


def test_depth_limit_is_exact() -> None:
    limits = DurableLimits(max_depth=3)
    check_durable([[[1]]], limits=limits)
    with pytest.raises(WorkflowValueError):
        check_durable([[[[1]]]], limits=limits)


def test_reference_bombs_are_bounded_by_the_size_limit() -> None:
    node: Any = ["x" * 10]
    for _ in range(60):  # 2**60 leaves if expanded
        node = [node, node]
    with pytest.raises(WorkflowValueError, match="larger than"):
        check_durable(node, limits=DurableLimits(max_bytes=1 << 20, max_depth=256))


def test_size_limit_counts_utf8_bytes() -> None:
    limits = DurableLimits(max_bytes=100)
    encode_durable("é" * 40, limits=limits)  # 80 bytes + quotes
    with pytest.raises(WorkflowValueError, match="larger than the limit of 100 bytes"):
        encode_durable("é" * 60, limits=limits)


def test_canonical_encoding() -> None:
    assert (
        encode_durable({"b": 1, "a": [True, None, 1.5, "é"]}) == '{"a":[true,null,1.5,"é"],"b":1}'
    )
    assert encode_durable({"a": 1, "b": 2}) == encode_durable({"b": 2, "a": 1})
    assert encode_durable((1, 2)) == encode_durable([1, 2])


def test_numbers_keep_their_type_and_value() -> None:
    for value in (1e20, 2**70, 1e300, 0.1, -0.0, 5e-324, 10**400):
        back = clone_durable(value)
        assert type(back) is type(value)
        assert repr(back) == repr(value)


def test_decode_refuses_non_finite_constants() -> None:
    with pytest.raises(ValueError):
        decode_durable("[NaN]")


@pytest.mark.parametrize(
    ("index", "values", "bad"),
    [
        (slice(None, None, 2), [1, math.nan], 2),
        (slice(None, None, -1), [1, math.nan, 2, 3], 2),
        (slice(1, 3), [1, math.nan], 2),
        (slice(10, None), [math.nan], 4),
    ],
)
def test_a_value_placed_by_slice_assignment_is_named_at_its_index(
    index: slice, values: list[Any], bad: int
) -> None:
    """``encode_placed`` names the index the value landed at, as the full check does."""
    from yieldstar_django.core.drafts import WriteLog, build_draft
    from yieldstar_django.core.durable import encode_placed

    log = WriteLog()
    draft = build_draft({"l": [0, 0, 0, 0]}, log)
    draft["l"][index] = values
    with pytest.raises(WorkflowValueError) as full:
        encode_durable(draft)
    with pytest.raises(WorkflowValueError) as placed:
        encode_placed(draft, log.placements)
    assert full.value.path == placed.value.path == ("l", bad)


def test_nesting_deeper_than_the_interpreter_can_encode_is_a_clean_error() -> None:
    """``MAX_DEPTH`` may be set above what ``json`` can recurse through: a value within
    the limit but too deep to encode is a ``WorkflowValueError``, not a ``RecursionError``."""
    value: Any = 0
    for _ in range(50_000):  # past CPython 3.13's C recursion limit as well as 3.11's
        value = [value]
    with pytest.raises(WorkflowValueError, match="too deeply"):
        encode_durable(value, limits=DurableLimits(max_depth=100_000))


def test_a_value_at_the_largest_max_depth_decodes_from_a_deep_call_stack() -> None:
    """``MAX_DEPTH`` is at most ``MAX_DEPTH_LIMIT`` (E003 past it): a value that deep,
    encoded from a shallow stack, still decodes with 400 frames more on the stack (a Celery
    task, a deep middleware chain), below Python 3.11's recursion limit of 1,000."""
    from yieldstar_django.conf import MAX_DEPTH_LIMIT

    limits = DurableLimits(max_depth=MAX_DEPTH_LIMIT)
    value: Any = []
    for _ in range(MAX_DEPTH_LIMIT - 1):
        value = [value]
    text = encode_durable(value, limits=limits)

    def decode_deeper(frames: int) -> Any:
        return decode_durable(text) if frames == 0 else decode_deeper(frames - 1)

    assert decode_deeper(400) == value


def _values(value: Any) -> int:
    """The values of ``value`` counted by a walk."""
    if isinstance(value, dict):
        return 1 + sum(_values(child) for child in value.values())
    if isinstance(value, list):
        return 1 + sum(_values(child) for child in value)
    return 1


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4)
    ),
    max_leaves=30,
)


@given(value=_JSON, indent=st.sampled_from([None, 1]), ascii=st.booleans())
def test_count_json_values_counts_what_a_walk_counts(value: Any, indent: Any, ascii: bool) -> None:
    """Strings holding brackets, commas, quotes and escapes, white space, any encoding of
    the text: the count of the text is the count of the value."""
    text = json.dumps(value, indent=indent, ensure_ascii=ascii)
    assert count_json_values(text) == _values(value)
    assert count_json_values(text.encode("utf-8", "surrogatepass")) == _values(value)


@pytest.mark.parametrize("kind", [str, bytes])
def test_count_json_values_of_many_strings_holds_little(kind: type) -> None:
    """A text of 200,000 short strings (holding commas and brackets, with white space) is
    counted right without a piece per string: the peak stays under the text's size."""
    text = "[" + ", ".join(['"a, [ ]"', "[ ]", '{"k": "}"}'] * 100_000) + "]"
    raw: str | bytes = text if kind is str else text.encode()
    tracemalloc.start()
    try:
        assert count_json_values(raw) == 1 + 100_000 * 4
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < len(text), (peak, len(text))


@pytest.mark.parametrize(
    "value",
    [[[]] * 99, {"a": [0] * 98}, [""] * 99, {str(i): None for i in range(99)}],
    ids=["lists", "ints", "strings", "members"],
)
def test_more_values_than_the_limit_is_not_durable(value: Any) -> None:
    """100 values against a limit of 99 (and of 100, which admits them)."""
    with pytest.raises(WorkflowValueError, match="more than the limit of 99 values") as info:
        encode_durable(value, limits=DurableLimits(max_nodes=99))
    assert info.value.code == "INVALID_STEP_VALUE"
    assert decode_durable(encode_durable(value, limits=DurableLimits(max_nodes=100))) == value


def test_values_placed_in_a_draft_count_with_the_whole_state() -> None:
    """``encode_placed`` checks only the values placed, but counts the whole encoding."""
    log = WriteLog()
    draft = build_draft({"a": [0] * 97}, log)
    draft["b"] = 1  # 1 + 98 + 1 values
    assert encode_placed(detach(draft), log.placements, limits=DurableLimits(max_nodes=100))
    draft["c"] = 1
    with pytest.raises(WorkflowValueError, match="more than the limit of 100 values"):
        encode_placed(detach(draft), log.placements, limits=DurableLimits(max_nodes=100))
