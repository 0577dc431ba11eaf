"""The diff of a replacement against the old state's stored text (``diff_stored``): the
same paths as the diff of the decoded state, with the old state never decoded whole."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from yieldstar_django.core import compute
from yieldstar_django.core.changes import ChangedPaths
from yieldstar_django.core.commits import StoredState
from yieldstar_django.core.definition import StoreDefinition
from yieldstar_django.core.durable import decode_durable, encode_durable
from yieldstar_django.core.memory import MemoryStoreClient
from yieldstar_django.core.paths import diff_paths, diff_stored
from yieldstar_django.core.store import Replacement
from yieldstar_django.core.stored_text import (
    LAZY_LEVELS,
    LEAF_CHARS,
    StoredContainer,
    read_to_end,
    stored_root,
)

keys = st.text(alphabet="abcxyz", min_size=1, max_size=3)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet='ab"\\\u00e9 ', max_size=4)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=30,
)


def stored(value: Any) -> Any:
    """``value`` as storage reads it back (keys in stored order)."""
    return decode_durable(encode_durable(value))


@settings(max_examples=400, deadline=None)
@given(old=values, new=values)
def test_the_stored_diff_finds_the_paths_of_the_decoded_diff(old: Any, new: Any) -> None:
    new = stored(new)
    assert diff_stored(encode_durable(old), new) == diff_paths(stored(old), new)


@settings(max_examples=200, deadline=None)
@given(old=values, data=st.data())
def test_a_small_change_deep_down_is_found_at_its_path(old: Any, data: st.DataObject) -> None:
    """Edit one member somewhere in a copy of the old state: the stored diff names a
    prefix of its path (every recorded path is a prefix of a changed one)."""
    new = stored(old)
    node, path = new, ()
    while isinstance(node, (dict, list)) and node and data.draw(st.booleans()):
        keys_here = sorted(node) if isinstance(node, dict) else range(len(node))
        key = data.draw(st.sampled_from(keys_here))
        path, parent, node = (*path, key), node, node[key]
    if not path:
        return
    parent[path[-1]] = {"edited": True}
    found = diff_stored(encode_durable(old), new)
    assert found == diff_paths(stored(old), new)
    if stored(old) != new:
        assert found, path
        for p in found:  # on the edited path: above it, at it or under it
            assert p[: len(path)] == path or path[: len(p)] == p, (found, path)


def test_members_are_read_lazily_in_order_and_skipped_when_left() -> None:
    text = json.dumps({"a": [1, [2, [3, [4]]]], "b": {"c": [5]}, "d": 6}, separators=(",", ":"))
    root = stored_root(text)
    assert isinstance(root, StoredContainer) and root.is_dict
    members = root.members()
    key, a = next(members)
    assert key == "a" and isinstance(a, StoredContainer)  # not read: skipped below
    key, b = next(members)
    assert key == "b" and isinstance(b, StoredContainer)
    (key, c), *rest = list(b.members())
    assert key == "c" and rest == []
    assert c == [5]  # a container of no container: decoded in one call
    assert next(members) == ("d", 6)
    assert root.finish() == len(text)
    assert stored_root("7") == 7 and stored_root('"x"') == "x"
    assert LAZY_LEVELS == 3
    _, one = next(stored_root("[[[[1]]]]").members())
    _, two = next(one.members())
    assert list(two.members()) == [(0, [1])]  # below LAZY_LEVELS: decoded


def test_small_containers_of_no_container_are_decoded_in_one_call() -> None:
    """Each member of a wide state of empty lists is decoded by the scanner, not read as a
    ``StoredContainer`` of its own; a longer one, or one holding a container, is read
    lazily; a malformed one raises as any."""
    root = stored_root("[" + ",".join(["[]", "{}", '["]", 1]', "[[]]"] * 3) + "]")
    members = [value for _, value in root.members()]
    assert members[:3] == [[], {}, ["]", 1]] and isinstance(members[3], StoredContainer)
    long = "[" + ",".join(["1"] * (LEAF_CHARS // 2)) + "]"
    (_, value), *_ = stored_root(f"[{long}]").members()
    assert isinstance(value, StoredContainer) and value.source() == long
    with pytest.raises(ValueError):
        read_to_end(stored_root("[[1,]]"))


def test_finish_checks_runs_of_shallow_members_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rest of a list of records (a container two levels deep each) is checked by the
    decoder a run at a time: no ``StoredContainer`` per record; a malformed record, or
    what follows a run, still raises."""
    records = [{"id": i, "tags": ["a", "]"], "n": {"x": i}} for i in range(1_000)]
    text = json.dumps({"r": records}, separators=(", ", ": "))
    made = []
    init = StoredContainer.__init__

    def counted(self: StoredContainer, *args: Any) -> None:
        made.append(args[1])
        init(self, *args)

    monkeypatch.setattr(StoredContainer, "__init__", counted)
    read_to_end(stored_root(text))
    assert len(made) == 2  # the root and its list
    for bad in ('{"r": [{"id": 1}, {"id": 2,}]}', '{"r": [1, 2 3]}', '{"r": [1, tru]}'):
        with pytest.raises(ValueError):
            read_to_end(stored_root(bad))


def test_whitespace_and_empty_containers_are_read() -> None:
    text = ' { "a" : [ ] , "b" : { } , "c" : [ 1 , { "d" : [ ] } ] } '
    root = stored_root(text)
    assert [k for k, _ in root.members()] == ["a", "b", "c"]
    assert diff_stored(text, {"a": [], "b": {}, "c": [1, {"d": [0]}]}) == [("c", 1, "d", 0)]


def test_a_cut_compares_the_stored_text_of_a_subtree() -> None:
    """Past the change budget only whether a subtree differs matters: a stored subtree
    equal to the new one (whatever its key order) records nothing."""
    old = {f"k{n}": {"x": [n, {"y": n}], "z": n} for n in range(50)}
    new = {f"k{n}": {"z": n, "x": [n, {"y": n}]} for n in range(50)}
    new["k7"]["z"] = -1
    assert diff_stored(encode_durable(old), new) == [("k7", "z")]
    many = {key: {"x": [0], "z": 0} for key in old}  # more changes than the budget
    found = diff_stored(encode_durable(old), many)
    assert found == diff_paths(stored(old), many, ChangedPaths())
    assert len(found) == 148  # ("k0", "x", 1) and the "x"s and "z"s of the 49 others


@pytest.mark.parametrize(
    "shape",
    [
        lambda: [[[[n, [n]]]] for n in range(4_000)],
        lambda: {"data": [{"id": n, "tags": [n, n + 1]} for n in range(4_000)]},
        lambda: {"a": {"b": [[n] * 5 for n in range(4_000)]}},
    ],
    ids=["list-of-chains", "one-key", "two-keys-deep"],
)
def test_the_old_state_is_never_decoded_whole(shape: Any) -> None:
    """The diff's peak memory is a fraction of decoding the old state (which the diff of
    the decoded state holds beside the new one)."""
    old_text = encode_durable(shape())
    new = shape()
    tracemalloc.start()
    try:
        decode_durable(old_text)
        decoded_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        assert diff_stored(old_text, new) == []
        diff_peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert diff_peak < decoded_peak / 4, (diff_peak, decoded_peak)


class _FreshReads(MemoryStoreClient):
    """Each read a copy of the stored text, as a database's reads are: the row an update
    computes from is then the only holder of its text."""

    def read_store(self, definition: StoreDefinition, id: str) -> StoredState | None:
        row = super().read_store(definition, id)
        if row is None:
            return None
        return StoredState(row.instance_id, row.version, (row.encoded + " ")[:-1])


@pytest.mark.parametrize(
    "updater",
    [lambda new: Replacement(lambda: new), lambda new: lambda draft: new],
    ids=["replacement", "returned"],
)
def test_the_old_text_goes_before_the_new_state_is_encoded(
    monkeypatch: pytest.MonkeyPatch, updater: Any
) -> None:
    """Once the new state is diffed against the row's text, the update holds only the
    row's id and version: when the new state is encoded, the memory in use is that of a
    replacement of an empty state, not the old text's more."""
    definition = StoreDefinition("big", None, lambda id: [])
    old = [{"id": n, "name": f"old-{n}", "tags": ["a", n]} for n in range(20_000)]
    new = [{"id": n, "name": f"new-{n}", "tags": ["b", n]} for n in range(40_000)]
    in_use: list[int] = []
    encode = compute.encode_checked

    def measured(*args: Any, **kwargs: Any) -> str:
        in_use.append(tracemalloc.get_traced_memory()[0])
        return encode(*args, **kwargs)

    monkeypatch.setattr(compute, "encode_checked", measured)

    def held_at_encoding(before: Any) -> int:
        client = _FreshReads(snapshots=0)
        client.update_store(definition, "a", updater=Replacement(lambda: before))
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            client.update_store(definition, "a", updater=updater(new))
        finally:
            tracemalloc.stop()
        return in_use[-1] - base

    old_chars = len(encode_durable(old))
    extra = held_at_encoding(old) - held_at_encoding([])
    assert extra < old_chars / 10, (extra, old_chars)


@pytest.mark.parametrize(
    "text",
    [
        '{"a":[1,2}',
        '{"a":NaN}',
        "{",
        "[1,",
        '{"a"',
        '{"a":1 "b":2}',
        "",
        "nope",
        "[1]]",
        "{a:1}",
        '{"a" 1}',
        '{"a":1,}',
        "[1,]",
    ],
)
def test_a_text_that_is_not_stored_json_is_refused(text: str) -> None:
    """Read whole even where the diff could stop early (the root replaced)."""
    with pytest.raises(ValueError):
        diff_stored(text, 5)
    with pytest.raises(ValueError):
        diff_stored(text, {"a": [1, 2]})
