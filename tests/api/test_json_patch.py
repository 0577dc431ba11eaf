"""RFC 6902 JSON Patch and RFC 6901 JSON Pointer: the RFCs' own examples, then edges."""

from __future__ import annotations

from typing import Any

import pytest

from yieldstar_django.api.json_patch import (
    InvalidPatch,
    PatchConflict,
    PatchTestFailed,
    apply_patch,
    format_pointer,
    parse_patch,
    parse_pointer,
)

# RFC 6902 Appendix A: (document, patch, result), result None for an error.
APPENDIX_A: list[tuple[str, Any, list[dict[str, Any]], Any]] = [
    (
        "A.1 add object member",
        {"foo": "bar"},
        [{"op": "add", "path": "/baz", "value": "qux"}],
        {"baz": "qux", "foo": "bar"},
    ),
    (
        "A.2 add array element",
        {"foo": ["bar", "baz"]},
        [{"op": "add", "path": "/foo/1", "value": "qux"}],
        {"foo": ["bar", "qux", "baz"]},
    ),
    (
        "A.3 remove object member",
        {"baz": "qux", "foo": "bar"},
        [{"op": "remove", "path": "/baz"}],
        {"foo": "bar"},
    ),
    (
        "A.4 remove array element",
        {"foo": ["bar", "qux", "baz"]},
        [{"op": "remove", "path": "/foo/1"}],
        {"foo": ["bar", "baz"]},
    ),
    (
        "A.5 replace",
        {"baz": "qux", "foo": "bar"},
        [{"op": "replace", "path": "/baz", "value": "boo"}],
        {"baz": "boo", "foo": "bar"},
    ),
    (
        "A.6 move value",
        {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
        [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
        {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}},
    ),
    (
        "A.7 move array element",
        {"foo": ["all", "grass", "cows", "eat"]},
        [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
        {"foo": ["all", "cows", "eat", "grass"]},
    ),
    (
        "A.8 test success",
        {"baz": "qux", "foo": ["a", 2, "c"]},
        [
            {"op": "test", "path": "/baz", "value": "qux"},
            {"op": "test", "path": "/foo/1", "value": 2},
        ],
        {"baz": "qux", "foo": ["a", 2, "c"]},
    ),
    (
        "A.10 add nested member",
        {"foo": "bar"},
        [{"op": "add", "path": "/child", "value": {"grandchild": {}}}],
        {"foo": "bar", "child": {"grandchild": {}}},
    ),
    (
        "A.11 ignore unrecognized elements",
        {"foo": "bar"},
        [{"op": "add", "path": "/baz", "value": "qux", "xyz": 123}],
        {"foo": "bar", "baz": "qux"},
    ),
    (
        "A.14 ~ escape ordering",
        {"/": 9, "~1": 10},
        [{"op": "test", "path": "/~01", "value": 10}],
        {"/": 9, "~1": 10},
    ),
    (
        "A.16 add array value",
        {"foo": ["bar"]},
        [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}],
        {"foo": ["bar", ["abc", "def"]]},
    ),
]


@pytest.mark.parametrize(
    ("document", "patch", "expected"),
    [case[1:] for case in APPENDIX_A],
    ids=[case[0] for case in APPENDIX_A],
)
def test_rfc_6902_appendix_a(document: Any, patch: Any, expected: Any) -> None:
    before = repr(document)
    assert apply_patch(document, patch) == expected
    assert repr(document) == before  # not in place: the input is untouched


def test_a9_failed_test() -> None:
    with pytest.raises(PatchTestFailed):
        apply_patch({"baz": "qux"}, [{"op": "test", "path": "/baz", "value": "bar"}])


def test_a12_add_to_nonexistent_target() -> None:
    with pytest.raises(PatchConflict):
        apply_patch({"foo": "bar"}, [{"op": "add", "path": "/baz/bat", "value": "qux"}])


def test_a15_comparing_strings_and_numbers() -> None:
    document = {"/": 9, "~1": 10}
    with pytest.raises(PatchTestFailed):
        apply_patch(document, [{"op": "test", "path": "/~01", "value": "10"}])


def test_a13_invalid_op_member() -> None:
    with pytest.raises(InvalidPatch):
        parse_patch([{"op": "spam", "path": "/a"}])


@pytest.mark.parametrize(
    "patch",
    [
        {},
        "x",
        [1],
        [{"path": "/a"}],
        [{"op": "add", "path": "/a"}],  # no value
        [{"op": "add", "path": 1, "value": 1}],
        [{"op": "add", "path": "a", "value": 1}],  # no leading slash
        [{"op": "remove", "path": "/a~2"}],  # bad escape
        [{"op": "move", "path": "/a"}],  # no from
        [{"op": "move", "from": "/a", "path": "/a/b"}],  # into its own child
        [{"op": "copy", "from": 3, "path": "/a"}],
    ],
)
def test_invalid_patches(patch: Any) -> None:
    with pytest.raises(InvalidPatch):
        apply_patch({"a": {}}, patch)


@pytest.mark.parametrize(
    "patch",
    [
        [{"op": "remove", "path": "/missing"}],
        [{"op": "replace", "path": "/missing", "value": 1}],
        [{"op": "add", "path": "/list/5", "value": 1}],
        [{"op": "add", "path": "/list/01", "value": 1}],
        [{"op": "add", "path": "/list/x", "value": 1}],
        [{"op": "remove", "path": "/list/-"}],
        [{"op": "add", "path": "/n/x", "value": 1}],  # through a scalar
        [{"op": "move", "from": "/missing", "path": "/b"}],
        [{"op": "copy", "from": "/list/9", "path": "/b"}],
        [{"op": "remove", "path": ""}],
        [{"op": "test", "path": "/list/99999999999999999999999", "value": 1}],
    ],
)
def test_conflicting_patches(patch: Any) -> None:
    with pytest.raises(PatchConflict):
        apply_patch({"list": [1, 2], "n": 3}, patch)


def test_whole_document_operations() -> None:
    assert apply_patch({"a": 1}, [{"op": "replace", "path": "", "value": [1]}]) == [1]
    assert apply_patch({"a": 1}, [{"op": "add", "path": "", "value": 7}]) == 7
    assert apply_patch({"a": 1}, [{"op": "test", "path": "", "value": {"a": 1.0}}]) == {"a": 1}


def test_test_compares_as_json() -> None:
    document = {"a": [1, {"b": True}], "n": 1}
    apply_patch(document, [{"op": "test", "path": "/a", "value": [1.0, {"b": True}]}])
    for wrong in (True, "1", None, [1]):
        with pytest.raises(PatchTestFailed):
            apply_patch(document, [{"op": "test", "path": "/n", "value": wrong}])
    with pytest.raises(PatchTestFailed):
        apply_patch({"b": 1}, [{"op": "test", "path": "/b", "value": True}])


def test_in_place_and_values_copied() -> None:
    document: dict[str, Any] = {"a": {}}
    value = {"deep": [1]}
    patch = [
        {"op": "add", "path": "/a/x", "value": value},
        {"op": "add", "path": "/a/x/deep/-", "value": 2},
    ]
    result = apply_patch(document, patch, in_place=True)
    assert result is document
    assert document == {"a": {"x": {"deep": [1, 2]}}}
    assert value == {"deep": [1]}  # the patch can be applied again
    assert apply_patch({"a": {}}, patch) == {"a": {"x": {"deep": [1, 2]}}}


def test_copy_is_deep() -> None:
    result = apply_patch(
        {"a": {"l": [1]}},
        [{"op": "copy", "from": "/a", "path": "/b"}, {"op": "add", "path": "/b/l/-", "value": 2}],
    )
    assert result == {"a": {"l": [1]}, "b": {"l": [1, 2]}}


def test_move_to_itself_is_a_noop() -> None:
    assert apply_patch({"a": 1}, [{"op": "move", "from": "/a", "path": "/a"}]) == {"a": 1}


def test_errors_name_the_operation() -> None:
    with pytest.raises(PatchConflict) as info:
        apply_patch(
            {"a": 1}, [{"op": "test", "path": "/a", "value": 1}, {"op": "remove", "path": "/b"}]
        )
    assert info.value.index == 1
    assert "operation 1" in str(info.value)


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", ()),
        ("/", ("",)),
        ("/foo/0", ("foo", "0")),
        ("/a~1b", ("a/b",)),
        ("/m~0n", ("m~n",)),
        ("/~01", ("~1",)),
        ("/ ", (" ",)),
    ],
)
def test_pointers_round_trip(text: str, tokens: tuple[str, ...]) -> None:
    assert parse_pointer(text) == tokens
    assert format_pointer(tokens) == text


@pytest.mark.parametrize("text", ["a", "/~", "/~2", "/a~"])
def test_bad_pointers(text: str) -> None:
    with pytest.raises(ValueError):
        parse_pointer(text)


def test_copies_past_max_copied_are_a_conflict() -> None:
    """Sixty-four copies of the whole document would make it ``2**64`` times larger: the
    copy that passes ``max_copied`` (8 MiB, the default ``MAX_STATE_BYTES``) is refused."""
    doubling = [{"op": "copy", "from": "", "path": f"/c{i}"} for i in range(64)]
    with pytest.raises(PatchConflict, match="copies more than 8388608 bytes") as caught:
        apply_patch({"a": "x" * 100}, doubling, max_copied=8 * 1024 * 1024)
    assert caught.value.index is not None and caught.value.index < 20


def test_copies_within_max_copied_apply() -> None:
    document = {"a": [1, 2], "b": {}}
    patch = [{"op": "copy", "from": "/a", "path": "/b/a"}, {"op": "copy", "from": "", "path": "/c"}]
    result = apply_patch(document, patch, max_copied=64)
    assert result == {"a": [1, 2], "b": {"a": [1, 2]}, "c": {"a": [1, 2], "b": {"a": [1, 2]}}}
    assert apply_patch(document, patch) == result  # no bound without max_copied


@pytest.mark.parametrize(
    "value",
    [
        {"a": [1, 2.5, None, True, False, "x"], "bb": {"c": {}}},
        [[], {}, "", 0, -12345678901234567890],
        "text",
        None,
    ],
)
def test_json_size_never_passes_the_encoding(value: Any) -> None:
    import json

    from yieldstar_django.api.jsonvalue import json_size

    encoded = len(json.dumps(value, separators=(",", ":")))
    size = json_size(value, limit=10_000)
    assert encoded - 4 <= size <= encoded  # an empty {} or [] counts one character short


def test_json_size_stops_counting_past_its_limit() -> None:
    from yieldstar_django.api.jsonvalue import json_size

    big = ["x" * 10] * 1000
    assert json_size(big, limit=100_000) == 13_001
    assert 50 < json_size(big, limit=50) < 1_100  # the list's brackets and commas, one string
