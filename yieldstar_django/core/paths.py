"""Changed paths and the wake rule: which changes a waiter's read paths must see.

* ``diff_paths`` is the O(state) structural fallback for replacements and transformed states
  (a draft records its writes itself, :mod:`.drafts`); both record into a bounded
  ``ChangedPaths`` (:mod:`.changes`). ``diff_stored`` is the same diff with the old state
  read from its stored text a member at a time (:mod:`.stored_text`).
* ``paths_intersect`` is prefix intersection: extra paths cost a spurious wake, missing ones
  would lose a wake, so every rule here errs towards recording more. ``wakes_waiter`` is the
  wake rule every client applies: intersection, or a change at the root ``()``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from .changes import ChangedPaths, PathLink, collapse_paths
from .durable import collector_paused
from .stored_text import StoredContainer, read_to_end, stored_root
from .types import StorePath

__all__ = [
    "changes_root",
    "collapse_paths",
    "diff_paths",
    "diff_stored",
    "paths_intersect",
    "wakes_waiter",
]


def _same_scalar(left: Any, right: Any) -> bool:
    if type(left) is not type(right):
        return False
    if type(left) is float:
        return bool(left == right) and repr(left) == repr(right)
    return bool(left == right)


def diff_paths(previous: Any, current: Any, changes: ChangedPaths | None = None) -> list[StorePath]:
    """Paths where ``current`` differs from ``previous``, bounded as ``changes`` (a fresh
    ``ChangedPaths`` by default) bounds them: O(size of both states), whatever their depth.

    Lists are compared index by index, so a splice reports every shifted index (over-wakes,
    which is safe).
    """
    changes = ChangedPaths() if changes is None else changes
    root = PathLink.root()
    if _containers_of_one_kind(previous, current):
        with collector_paused():
            _diff_into(changes, previous, current, root)
    elif _differ(previous, current):
        changes.add(root, own=True)
    return changes.paths()


def diff_stored(previous: str, current: Any) -> list[StorePath]:
    """``diff_paths`` of the state stored as the text ``previous`` and ``current``, the
    old state read from its text a member at a time (``StoredContainer``): it is never
    held decoded whole beside the new one. ``ValueError`` (or ``RecursionError``) when
    ``previous`` does not decode, as ``decode_durable`` would raise."""
    changes = ChangedPaths()
    with collector_paused():
        old = stored_root(previous)
        root = PathLink.root()
        if _containers_of_one_kind(old, current):
            _diff_into(changes, old, current, root)
        elif _differ(old, current):
            changes.add(root, own=True)
        if type(old) is StoredContainer:
            read_to_end(old)  # a text that does not decode raises, wherever
    return changes.paths()


def _containers_of_one_kind(left: Any, right: Any) -> bool:
    if type(left) is StoredContainer:
        return isinstance(right, dict) if left.is_dict else isinstance(right, list)
    return (isinstance(left, dict) and isinstance(right, dict)) or (
        isinstance(left, list) and isinstance(right, list)
    )


def _differ(left: Any, right: Any) -> bool:
    """Whether two values that are not both dicts or both lists differ."""
    return (
        isinstance(left, (dict, list, StoredContainer))
        or isinstance(right, (dict, list))
        or not _same_scalar(left, right)
    )


def _differ_whole(left: Any, right: Any) -> bool:
    """Whether two containers differ, in C: equal JSON text means equal values of equal
    types (``1`` and ``1.0``, ``0.0`` and ``-0.0`` encode apart); texts that differ only in
    key order answer "differ", which over-reports (safe). A ``StoredContainer`` is
    compared by its text against ``right`` encoded as storage encodes."""
    try:
        if type(left) is StoredContainer:
            return left.source() != _stored_encoding(right)
        if left != right:
            return True
        return json.dumps(left) != json.dumps(right)
    except (TypeError, ValueError, RecursionError):
        return True


def _stored_encoding(value: Any) -> str:
    """``value`` as ``encode_durable`` writes it (no checks: a value it would refuse only
    answers "differ")."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def _members(changes: ChangedPaths, left: Any, right: Any, link: PathLink) -> Iterator[Any]:
    """The ``(left, right, key)`` members both containers hold, recording the keys (or
    indices) only one of them holds; stops once ``changes`` records ``link`` itself."""
    if type(left) is StoredContainer:
        yield from _stored_members(changes, left, right, link)
        return
    if isinstance(left, dict):
        for key in dict.keys(left):
            if dict.__contains__(right, key):
                yield dict.__getitem__(left, key), dict.__getitem__(right, key), key
            elif changes.add(link, key):
                return
        for key in dict.keys(right):
            if not dict.__contains__(left, key) and changes.add(link, key):
                return
        return
    common = min(len(left), len(right))
    for index in range(common):
        yield list.__getitem__(left, index), list.__getitem__(right, index), index
    for index in range(common, max(len(left), len(right))):
        if changes.add(link, index):
            return


def _stored_members(
    changes: ChangedPaths, left: StoredContainer, right: Any, link: PathLink
) -> Iterator[Any]:
    """``_members`` of a ``StoredContainer`` and a container of its kind: the stored
    members are read as they are compared."""
    if left.is_dict:
        seen: set[Any] = set()
        for key, value in left.members():
            seen.add(key)
            if dict.__contains__(right, key):
                yield value, dict.__getitem__(right, key), key
            elif changes.add(link, key):
                return
        for key in dict.keys(right):
            if key not in seen and changes.add(link, key):
                return
        return
    count, read = len(right), 0
    for segment, value in left.members():
        index = int(segment)
        read = index + 1
        if index < count:
            yield value, list.__getitem__(right, index), index
        elif changes.add(link, index):
            return
    for index in range(read, count):
        if changes.add(link, index):
            return


def _diff_into(changes: ChangedPaths, previous: Any, current: Any, root: PathLink) -> None:
    """Record where two containers of one kind differ: a depth-first walk holding one
    iterator per level, so its memory grows with the depth, not the width. A subtree whose
    path is recorded already (at the cut) is not walked."""
    stack = [(_members(changes, previous, current, root), root)]
    while stack:
        members, link = stack[-1]
        for left, right, key in members:
            if left is right:
                continue
            if _containers_of_one_kind(left, right):
                child = changes.link(link, key)
                if child is not link:
                    stack.append((_members(changes, left, right, child), child))
                    break
                # At the cut only whether they differ matters: asked of the C codec.
                if changes.covers(link) or not _differ_whole(left, right):
                    continue
                changes.add(link, own=True)
                break
            if _differ(left, right) and changes.add(link, key):
                break  # ``link`` itself is recorded: its other members add nothing
        else:
            stack.pop()
            continue
        if changes.covers(root):
            return


def paths_intersect(read_paths: Iterable[StorePath], write_paths: Iterable[StorePath]) -> bool:
    """True when some read path and some write path are equal or one is a prefix of the other.

    O(total length of the paths).
    """
    writes: set[StorePath] = set()
    write_prefixes: set[StorePath] = set()
    for write in write_paths:
        write = tuple(write)
        writes.add(write)
        for n in range(len(write) + 1):
            write_prefixes.add(write[:n])
    if not writes:
        return False
    for read in read_paths:
        read = tuple(read)
        if read in write_prefixes:
            return True
        if any(read[:n] in writes for n in range(len(read))):
            return True
    return False


def changes_root(changed_paths: Iterable[StorePath]) -> bool:
    """True when a change replaced the whole state (a changed path is ``()``)."""
    return any(len(path) == 0 for path in changed_paths)


def wakes_waiter(read_paths: Iterable[StorePath], changed_paths: Iterable[StorePath]) -> bool:
    """The wake rule of a waiter on the store instance it read: its read paths intersect
    the changed paths, or the change replaced the root. A root change wakes even a waiter
    that read nothing (its selector may have depended on the state's type or on the
    state being there at all): a lost wake is a bug, a spurious one only costs a re-run.

    Every client applies this rule (the database ones through ``core.waiter_index.path_match``).
    """
    changed = [tuple(path) for path in changed_paths]
    return changes_root(changed) or paths_intersect(read_paths, changed)
