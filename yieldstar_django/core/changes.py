"""A commit's changed paths, bounded: what the diff and the drafts record into.

The wake lookup of a commit costs one index key per prefix of each changed path and one
per path (``core.waiter_index``): a path of ``n`` segments costs ``n + 2``. ``ChangedPaths``
keeps that cost under a budget whatever the change, and its own work linear in what it is
given:

* a path deeper than ``MAX_CHANGED_PATH_DEPTH`` segments is recorded as its prefix of that
  many;
* when the paths would cost more than ``MAX_CHANGE_KEYS`` keys, they are recorded at the
  deepest level ``d`` at which they fit: every path cut to its first ``d`` segments
  (duplicates merged). ``d = 0`` is the root ``()``, which wakes every waiter of the store.

A recorded path is always a prefix of a changed one, so it intersects every read path
the changed one does: a cut only adds wakes (spurious, harmless), it never loses one
(``docs/concepts/waiters.md#bounded-changes``).

Paths are given as ``PathLink`` chains (a segment and its parent), so recording costs
O(1) per path however deep, and a path is only spelled out as a tuple once it is kept.
"""

from __future__ import annotations

import itertools
from typing import Any, Final

from .constants import MAX_CHANGE_KEYS, MAX_CHANGED_PATH_DEPTH
from .types import PathSegment, StorePath

__all__ = ["ChangedPaths", "PathLink", "collapse_paths"]


class PathLink:
    """One segment of a path, linked to its parent (``root()`` is ``()``).

    ``anchor`` is its ancestor at depth ``MAX_CHANGED_PATH_DEPTH`` when it is deeper,
    else ``None`` (the link itself). ``counted``, ``end`` and ``seq`` belong to the one
    ``ChangedPaths`` the link is recorded into."""

    __slots__ = ("anchor", "counted", "depth", "end", "parent", "segment", "seq")

    def __init__(self, segment: PathSegment | None, parent: PathLink | None) -> None:
        self.segment = segment
        self.parent = parent
        self.depth: int = 0 if parent is None else parent.depth + 1
        # ``None`` stands for the link itself: a reference to itself would be a cycle, which
        # only the cyclic collector frees (paused during a diff: a walk's links would pile up).
        self.anchor: PathLink | None = (
            None
            if parent is None or self.depth <= MAX_CHANGED_PATH_DEPTH
            else (parent.anchor or parent)
        )
        self.counted = False
        self.end = False
        self.seq = -1

    @classmethod
    def root(cls) -> PathLink:
        return cls(None, None)

    def child(self, segment: PathSegment) -> PathLink:
        return PathLink(segment, self)

    def path(self) -> StorePath:
        """The path as a tuple: O(depth)."""
        segments: list[Any] = []
        link: PathLink | None = self
        while link is not None and link.parent is not None:
            segments.append(link.segment)
            link = link.parent
        return tuple(reversed(segments))


class ChangedPaths:
    """Changed paths recorded one at a time, kept within ``budget`` keys (see the module).

    ``add(parent, key)`` records the path ``parent`` + ``key``; ``add(link)`` the path of
    ``link``. Each costs O(1) amortized (plus one walk up a link chain of at most
    ``depth`` links when the cut moved). Only links at depth ``cut`` or above are kept, at
    most about ``budget`` of them."""

    def __init__(self, budget: int = MAX_CHANGE_KEYS, depth: int = MAX_CHANGED_PATH_DEPTH):
        if depth > MAX_CHANGED_PATH_DEPTH:
            raise ValueError(f"depth is at most {MAX_CHANGED_PATH_DEPTH}")
        self._budget = budget
        #: The deepest level kept: a path below it is recorded as its prefix at ``cut``.
        self.cut = depth
        #: By depth (up to ``cut``): the links that lead to a recorded path, and the
        #: recorded ones.
        self._levels: list[list[PathLink]] = [[] for _ in range(depth + 1)]
        self._ends: list[list[PathLink]] = [[] for _ in range(depth + 1)]
        #: The key cost of the recorded paths above ``cut``: sum of (depth + 2).
        self._above = 0
        #: One link per (parent, key) recorded through ``add(parent, key)``.
        self._children: list[dict[tuple[int, Any], PathLink]] = [{} for _ in range(depth + 1)]
        self._seq = itertools.count()

    def link(self, parent: PathLink, key: PathSegment) -> PathLink:
        """The link of ``parent`` + ``key`` for a walk that may record under it: ``parent``
        itself once it is at the cut (what is below is recorded as it)."""
        if parent.depth >= self.cut:
            return parent
        return PathLink(key, parent)

    def add(self, parent: PathLink, key: Any = None, *, own: bool = False) -> bool:
        """Record ``parent`` + ``key`` (``parent`` itself with ``own``). True when the path
        was recorded as ``parent`` or above it, so any other key of ``parent`` would be too."""
        if own:
            link = parent
        elif parent.depth >= self.cut:
            link = parent
            own = True
        else:
            children = self._children[parent.depth + 1]
            link = children.get((id(parent), key))  # type: ignore[assignment]
            if link is None:
                link = children[(id(parent), key)] = PathLink(key, parent)
        self._record(self._at_cut(link))
        return own

    def covers(self, link: PathLink) -> bool:
        """Whether every path at or under ``link`` is recorded already (as ``link`` or a
        prefix of it)."""
        return self._at_cut(link).end

    def _at_cut(self, link: PathLink) -> PathLink:
        link = link.anchor or link
        while link.depth > self.cut:
            link = link.parent  # type: ignore[assignment]
        return link

    def _record(self, link: PathLink) -> None:
        if link.end:
            return
        link.end = True
        link.seq = next(self._seq)
        depth = link.depth
        self._ends[depth].append(link)
        if depth < self.cut:
            self._above += depth + 2
        node: PathLink | None = link
        while node is not None and not node.counted:
            node.counted = True
            if node.seq < 0:
                node.seq = link.seq
            self._levels[node.depth].append(node)
            node = node.parent
        while self._cost() > self._budget and self.cut > 0:
            self._lower()

    def _cost(self) -> int:
        return len(self._levels[self.cut]) * (self.cut + 2) + self._above

    def _lower(self) -> None:
        """Cut one level higher: the links at the old cut are recorded as their parents."""
        dropped = self.cut
        self.cut -= 1
        self._above -= len(self._ends[self.cut]) * (self.cut + 2)
        self._levels[dropped] = []
        self._ends[dropped] = []
        self._children[dropped] = {}

    def paths(self) -> list[StorePath]:
        """The recorded paths, each under no other, in the order they were first recorded
        (a cut prefix where its first path below was)."""
        kept = [link for level in self._ends[: self.cut] for link in level]
        kept += self._levels[self.cut]
        kept.sort(key=lambda link: link.seq)
        return collapse_paths(link.path() for link in kept)


#: Marks a path's end in the trie of ``collapse_paths``.
_END: Final = object()


def collapse_paths(paths: Any) -> list[StorePath]:
    """Deduplicate ``paths`` (first-seen order) and drop any path under another kept path:
    O(total length of the paths)."""
    unique = list(dict.fromkeys(paths))
    trie: dict[Any, Any] = {}
    for path in unique:
        node = trie
        for segment in path:
            node = node.setdefault(segment, {})
        node[_END] = True
    kept = []
    for path in unique:
        node = trie
        for segment in path:
            if _END in node:
                break
            node = node[segment]
        else:
            kept.append(path)
    return kept
