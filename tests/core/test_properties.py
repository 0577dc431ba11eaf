"""Property tests: tracked write paths cover the structural diff; the codec round-trips."""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from yieldstar_django.core.drafts import WriteLog, build_draft
from yieldstar_django.core.durable import decode_durable, encode_durable, encode_placed
from yieldstar_django.core.errors import WorkflowValueError
from yieldstar_django.core.paths import diff_paths, paths_intersect

keys = st.text(alphabet="abcxyz", min_size=1, max_size=3)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5).filter(
        lambda s: "\x00" not in s and not any("\ud800" <= c <= "\udfff" for c in s)
    )
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=20,
)
states = st.dictionaries(keys, values, max_size=5)


def containers(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths of every container, found without going through the draft's read methods."""
    found = [path] if isinstance(node, (dict, list)) else []
    if isinstance(node, dict):
        for k, v in dict.items(node):
            found += containers(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(list.__iter__(node)):
            found += containers(v, (*path, i))
    return found


DICT_ROUTES = [
    lambda d, k: d[k],
    lambda d, k: d.get(k),
    lambda d, k: d.setdefault(k),
    lambda d, k: next(v for kk, v in d.items() if kk == k),
    lambda d, k: list(d.values())[list(d).index(k)],
    lambda d, k: d.copy()[k],
    lambda d, k: dict(d)[k],
    lambda d, k: {**d}[k],
    lambda d, k: (d | {})[k],
    lambda d, k: ({} | d)[k],
    lambda d, k: copy.copy(d)[k],
]
LIST_ROUTES = [
    lambda lst, i: lst[i],
    lambda lst, i: lst[i - len(lst)],
    lambda lst, i: lst[i : i + 1][0],
    lambda lst, i: lst[::-1][len(lst) - 1 - i],
    lambda lst, i: list(lst)[i],
    lambda lst, i: [*lst][i],
    lambda lst, i: tuple(lst)[i],
    lambda lst, i: next(x for j, x in enumerate(lst) if j == i),
    lambda lst, i: list(reversed(lst))[len(lst) - 1 - i],
    lambda lst, i: lst.copy()[i],
    lambda lst, i: (lst + [])[i],  # noqa: RUF005 - the route under test
    lambda lst, i: ([] + lst)[i],  # noqa: RUF005 - the route under test
    lambda lst, i: (lst * 1)[i],
    lambda lst, i: copy.copy(lst)[i],
]


def reach(draft: Any, path: tuple[Any, ...], data: st.DataObject) -> Any:
    node = draft
    for segment in path:
        routes = DICT_ROUTES if isinstance(node, dict) else LIST_ROUTES
        node = data.draw(st.sampled_from(routes))(node, segment)
    return node


def apply(draft: Any, data: st.DataObject, values: Any = values, new_keys: Any = keys) -> None:
    for _ in range(data.draw(st.integers(1, 6))):
        path = data.draw(st.sampled_from(containers(draft)))
        node = reach(draft, path, data)
        if isinstance(node, dict):
            op = data.draw(
                st.sampled_from(["set", "del", "pop", "setdefault", "update", "clear", "popitem"])
            )
            key = data.draw(new_keys)
            if op == "set":
                node[key] = data.draw(values)
            elif op == "del" and key in node:
                del node[key]
            elif op == "pop":
                node.pop(key, None)
            elif op == "setdefault":
                node.setdefault(key, data.draw(values))
            elif op == "update":
                node.update({key: data.draw(values)})
            elif op == "clear":
                node.clear()
            elif op == "popitem" and node:
                node.popitem()
        else:
            op = data.draw(
                st.sampled_from(
                    [
                        "set",
                        "del",
                        "append",
                        "extend",
                        "insert",
                        "pop",
                        "remove",
                        "sort",
                        "reverse",
                        "clear",
                        "slice",
                        "iadd",
                    ]
                )
            )
            index = data.draw(st.integers(-5, 5))
            if op == "set" and -len(node) <= index < len(node):
                node[index] = data.draw(values)
            elif op == "del" and -len(node) <= index < len(node):
                del node[index]
            elif op == "append":
                node.append(data.draw(values))
            elif op == "extend":
                node.extend(data.draw(st.lists(values, max_size=3)))
            elif op == "insert":
                node.insert(index, data.draw(values))
            elif op == "pop" and -len(node) <= index < len(node):
                node.pop(index)
            elif op == "remove" and node:
                node.remove(node[0])
            elif op == "sort":
                node.sort(key=repr)
            elif op == "reverse":
                node.reverse()
            elif op == "clear":
                node.clear()
            elif op == "slice":
                node[0:1] = data.draw(st.lists(values, max_size=2))
            elif op == "iadd":
                node += [data.draw(values)]


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(state=states, data=st.data())
@pytest.mark.slow
def test_tracked_write_paths_cover_every_diffed_change(state: Any, data: st.DataObject) -> None:
    previous = copy.deepcopy(state)
    log = WriteLog()
    draft = build_draft(copy.deepcopy(state), log)
    apply(draft, data)
    final = json.loads(json.dumps(draft))
    written = log.paths()
    for changed in diff_paths(previous, final):
        assert any(changed[: len(w)] == w for w in written), (changed, written)
        assert paths_intersect([changed], written)


@settings(max_examples=300, deadline=None)
@given(value=values)
def test_durable_round_trip(value: Any) -> None:
    encoded = encode_durable(value)
    back = decode_durable(encoded)
    assert encode_durable(back) == encoded
    assert json.dumps(back, sort_keys=True) == json.dumps(
        json.loads(json.dumps(value)), sort_keys=True
    )


def _reorder(value: Any, data: st.DataObject) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        shuffled = data.draw(st.permutations(items))
        return {k: _reorder(v, data) for k, v in shuffled}
    if isinstance(value, list):
        rebuilt = [_reorder(v, data) for v in value]
        return tuple(rebuilt) if data.draw(st.booleans()) else rebuilt
    return value


@settings(max_examples=200, deadline=None)
@given(value=values, data=st.data())
def test_equal_values_encode_equally(value: Any, data: st.DataObject) -> None:
    assert encode_durable(_reorder(value, data)) == encode_durable(value)


bad_leaves = st.sampled_from(
    [
        lambda: math.nan,
        lambda: math.inf,
        lambda: "a\x00b",
        lambda: "\ud800",
        lambda: b"bytes",
        lambda: frozenset({1}),
        lambda: {1: "int key"},
        lambda: 1j,
    ]
).map(lambda make: make())
maybe_bad = st.recursive(
    scalars | bad_leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(state=states, data=st.data())
@pytest.mark.slow
def test_checking_placements_misses_no_non_durable_value(state: Any, data: st.DataObject) -> None:
    log = WriteLog()
    draft = build_draft(copy.deepcopy(state), log)
    apply(draft, data, values=maybe_bad, new_keys=keys | st.integers(0, 2) | st.just("k\x00"))
    try:
        full = encode_durable(draft)
    except WorkflowValueError:
        full = None
    if full is None:
        with pytest.raises(WorkflowValueError):
            encode_placed(draft, log.placements)
    else:
        try:
            assert encode_placed(draft, log.placements) == full
        except WorkflowValueError:
            pass  # a non-durable value placed and later removed: refused, conservatively
