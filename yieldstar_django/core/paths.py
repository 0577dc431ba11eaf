"""Changed paths and the wake rule: which changes a waiter's read paths must see.

* ``diff_paths`` is the O(state) structural fallback for replacements and transformed states
  (a draft records its writes itself, :mod:`.drafts`).
* ``paths_intersect`` is prefix intersection: extra paths cost a spurious wake, missing ones
  would lose a wake, so every rule here errs towards recording more. ``wakes_waiter`` is the
  wake rule every client applies: intersection, or a change at the root ``()``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .types import StorePath

__all__ = ["changes_root", "collapse_paths", "diff_paths", "paths_intersect", "wakes_waiter"]


def _same_scalar(left: Any, right: Any) -> bool:
    if type(left) is not type(right):
        return False
    if type(left) is float:
        return bool(left == right) and repr(left) == repr(right)
    return bool(left == right)


def diff_paths(previous: Any, current: Any) -> list[StorePath]:
    """Paths where ``current`` differs from ``previous``: O(size of both states).

    Lists are compared index by index, so a splice reports every shifted index (over-wakes,
    which is safe).
    """
    paths: list[StorePath] = []
    stack: list[tuple[Any, Any, StorePath]] = [(previous, current, ())]
    while stack:
        left, right, path = stack.pop()
        if left is right:
            continue
        if isinstance(left, dict) and isinstance(right, dict):
            for key in left.keys() | right.keys():
                if key not in left or key not in right:
                    paths.append((*path, key))
                else:
                    stack.append((left[key], right[key], (*path, key)))
        elif isinstance(left, list) and isinstance(right, list):
            common = min(len(left), len(right))
            for index in range(common):
                stack.append((left[index], right[index], (*path, index)))
            for index in range(common, max(len(left), len(right))):
                paths.append((*path, index))
        elif (
            isinstance(left, (dict, list))
            or isinstance(right, (dict, list))
            or not _same_scalar(left, right)
        ):
            paths.append(path)
    return collapse_paths(paths)


def collapse_paths(paths: Iterable[StorePath]) -> list[StorePath]:
    """Deduplicate ``paths`` (first-seen order) and drop any path under another kept path."""
    unique = list(dict.fromkeys(paths))
    present = set(unique)
    return [path for path in unique if not any(path[:n] in present for n in range(len(path)))]


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
