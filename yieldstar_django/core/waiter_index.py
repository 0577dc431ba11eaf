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

from .constants import MAX_PATH_KEY_LENGTH, WaiterKind
from .paths import changes_root
from .types import StorePath

__all__ = ["PathMatch", "path_key", "path_match", "waiter_path_rows"]

READ, PREFIX, ALWAYS = WaiterKind.READ, WaiterKind.PREFIX, WaiterKind.ALWAYS


def path_key(path: Iterable[str | int]) -> str:
    """The text a path is indexed by: equal paths, and only they, have equal keys.

    Compact ASCII JSON of the segments (``["a",0]``), so a ``str`` segment never equals an
    ``int`` one, and any character (``"\\x00"``, lone surrogates) is stored escaped. A key
    longer than ``MAX_PATH_KEY_LENGTH`` becomes ``#`` + its SHA-256.
    """
    text = json.dumps(list(path), ensure_ascii=True, separators=(",", ":"))
    if len(text) > MAX_PATH_KEY_LENGTH:
        return "#" + hashlib.sha256(text.encode("ascii")).hexdigest()
    return text


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
        path = tuple(path)
        rows[(READ, path_key(path))] = None
        for n in range(1, len(path)):
            rows[(PREFIX, path_key(path[:n]))] = None
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
        prefix[path_key(path)] = None
        for n in range(len(path) + 1):
            read[path_key(path[:n])] = None
    return PathMatch(False, list(read), list(prefix))
