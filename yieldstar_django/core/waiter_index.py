"""The waiter index: the keys a waiter's read paths are stored under, and the lookups that
find the waiters a set of changed paths wakes, by equality only (so the cost does not grow
with the number of waiters and no collation is involved).

A read path ``r`` and a changed path ``c`` intersect when one is a prefix of the other
(``core.paths``): ``r`` is indexed as a ``READ`` row keyed by ``r`` and a ``PREFIX`` row per
non-empty proper prefix of ``r``; a change ``c`` looks up ``READ`` rows keyed by every
prefix of ``c`` (``c`` and ``()`` included) and ``PREFIX`` rows keyed by ``c``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .constants import MAX_PATH_KEY_LENGTH, WaiterKind
from .paths import changes_root
from .types import StorePath

__all__ = ["PathMatch", "path_key", "path_match", "prefix_keys", "waiter_path_rows"]

READ, PREFIX, ALWAYS = WaiterKind.READ, WaiterKind.PREFIX, WaiterKind.ALWAYS


def path_key(path: Iterable[str | int]) -> str:
    """The text a path is indexed by: equal paths, and only they, have equal keys.

    Compact ASCII JSON of the segments (``["a",0]``), so a ``str`` segment never equals an
    ``int`` one, and any character (``"\\x00"``, lone surrogates) is stored escaped. A key
    longer than ``MAX_PATH_KEY_LENGTH`` becomes ``#`` + its SHA-256.
    """
    return prefix_keys(tuple(path))[-1]


def prefix_keys(path: StorePath) -> list[str]:
    """The ``path_key`` of every prefix of ``path``, ``()`` first and ``path`` last, built
    incrementally: O(length of ``path``'s key text), not O(length squared). Each segment is
    encoded once; past ``MAX_PATH_KEY_LENGTH`` one SHA-256 runs along the text and is
    copied at each prefix."""
    keys = ["[]"]
    text = "["
    digest: Any = None
    for index, segment in enumerate(path):
        part = ("," if index else "") + json.dumps(segment, ensure_ascii=True)
        if digest is None and len(text) + len(part) + 1 <= MAX_PATH_KEY_LENGTH:
            text += part
            keys.append(text + "]")
            continue
        if digest is None:
            digest = hashlib.sha256(text.encode("ascii"))
        digest.update(part.encode("ascii"))
        closed = digest.copy()
        closed.update(b"]")
        keys.append("#" + closed.hexdigest())
    return keys


def waiter_path_rows(
    read_paths: Iterable[StorePath], *, same_instance: bool = True
) -> list[tuple[int, str]]:
    """The ``(kind, key)`` rows that index a waiter (see ``WaiterPath``).

    ``READ`` for each read path, ``PREFIX`` for each of its non-empty proper prefixes; a
    waiter registered against another instance than the store's gets one ``ALWAYS`` row
    instead, so every later mutation wakes it.
    """
    if not same_instance:
        return [(ALWAYS, "")]
    rows: dict[tuple[int, str], None] = {}
    for path in read_paths:
        keys = prefix_keys(tuple(path))
        rows[(READ, keys[-1])] = None
        for key in keys[1:-1]:
            rows[(PREFIX, key)] = None
    return list(rows)


@dataclass(frozen=True)
class PathMatch:
    """The index lookups that find the waiters a set of changed paths wakes."""

    wake_all: bool
    read_keys: list[str]
    prefix_keys: list[str]


def path_match(changed_paths: Iterable[StorePath]) -> PathMatch:
    """A read path ``r`` and a changed path ``c`` intersect iff ``r`` is a prefix of ``c``
    (``READ`` rows keyed by any prefix of ``c``, ``c`` and ``()`` included) or ``c`` a
    proper prefix of ``r`` (``PREFIX`` rows keyed by ``c``). A change at ``()`` wakes
    every waiter of the store (``core.paths.wakes_waiter``, the rule every client applies)."""
    changed = [tuple(path) for path in changed_paths]
    if changes_root(changed):
        return PathMatch(True, [], [])
    read: dict[str, None] = {}
    prefix: dict[str, None] = {}
    for path in changed:
        keys = prefix_keys(path)
        prefix[keys[-1]] = None
        read.update(dict.fromkeys(keys))
    return PathMatch(False, list(read), list(prefix))
