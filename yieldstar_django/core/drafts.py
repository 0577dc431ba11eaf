"""Drafts: the tracked copy of a state an updater changes, and the paths it wrote.

* ``build_draft`` wraps a freshly decoded state in ``TrackedDict``/``TrackedList`` nodes that
  record every path written through item assignment, deletion and the in-place ``dict``/
  ``list`` methods, in O(changes). A change that shifts list elements records the list's own
  path. Nodes are adopted lazily: a container of the decoded state becomes a tracked node the
  first time it is reached through the draft (by any read: indexing, ``get``, ``values``,
  ``items``, iteration, slicing, ``copy``, ``+``, ``*``; and by ``*=``, whose copies share
  it), so building a draft and changing one field costs O(path), not O(state).
* Assigned values are stored as given (not walked, copied or adopted): a container placed in
  the draft is covered by the path recorded when it was placed there, so writes through it
  later are covered by prefix.
* ``detach`` turns a draft back into plain ``dict``/``list`` values.

Writes that bypass the draft's methods (``dict.__setitem__(draft, ...)``, or C helpers such as
``heapq`` that write a list's internals) are not seen: assign the result instead. Every rule
here errs towards recording more paths: an extra path costs a spurious wake, a missing one
would lose a wake.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar, SupportsIndex, cast

from .changes import ChangedPaths, PathLink
from .types import StorePath

__all__ = ["TrackedDict", "TrackedList", "WriteLog", "build_draft", "detach"]


class WriteLog:
    """What an updater did to one draft: the paths it wrote (bounded as ``ChangedPaths``
    bounds a commit's paths) and the values it placed (the only parts of the draft that
    did not come from storage)."""

    __slots__ = ("_assigned", "_changes", "placements")

    def __init__(self, changes: ChangedPaths | None = None) -> None:
        self._changes = ChangedPaths() if changes is None else changes
        self._assigned: set[int] = set()
        #: ``(parent, key, value, keyed)`` for every value placed at ``parent`` + ``key``;
        #: ``keyed`` when ``key`` is a dict key the updater chose (so it must be checked too).
        self.placements: list[tuple[PathLink, Any, Any, bool]] = []

    def record(self, link: PathLink, key: Any = None, *, own: bool = False) -> None:
        """Note a write at ``link`` + ``key`` (at ``link`` itself with ``own``)."""
        self._changes.add(link, key, own=own)

    def placed(self, link: PathLink, key: Any, value: Any, *, keyed: bool = False) -> None:
        """Note a value the updater put into the draft at ``link`` + ``key`` (never adopted
        later)."""
        self.placements.append((link, key, value, keyed))
        if type(value) is dict or type(value) is list:
            self._assigned.add(id(value))

    def paths(self) -> list[StorePath]:
        """Written paths, deduplicated, with paths covered by a recorded prefix removed."""
        return self._changes.paths()


def _adopt(log: WriteLog, value: Any, parent: PathLink | None, key: Any) -> Any:
    """The tracked node for a decoded container ``value`` at ``parent`` + ``key`` (the root
    when ``parent`` is ``None``), or ``value`` itself."""
    kind = type(value)
    if kind is not dict and kind is not list:
        return value
    if id(value) in log._assigned:
        return value
    link = PathLink.root() if parent is None else parent.child(key)
    return (TrackedDict if kind is dict else TrackedList)(value, link, log)


class _TrackedNode:
    """What ``TrackedDict`` and ``TrackedList`` share: the node's path and write log, and
    the adoption of the children reads return. ``_base`` is the builtin the node is."""

    # The concrete classes hold the two slots (a slotted mixin of a builtin is a layout
    # conflict); the type checker, shown no slots here, lets the mixin assign them.
    if not TYPE_CHECKING:
        __slots__ = ()
    _base: ClassVar[Any]
    _ys_log: WriteLog
    _ys_link: PathLink

    def __init__(self, data: Any, link: PathLink, log: WriteLog) -> None:
        self._base.__init__(self, data)
        self._ys_link = link
        self._ys_log = log

    # reads adopt the child they return

    def _child(self, key: Any, value: Any) -> Any:
        adopted = _adopt(self._ys_log, value, self._ys_link, key)
        if adopted is not value:
            self._base.__setitem__(self, key, adopted)
        return adopted

    def _adopt_all(self) -> None:
        if isinstance(self, dict):
            entries: Iterable[tuple[Any, Any]] = list(dict.items(self))
        else:
            entries = enumerate(list.__iter__(cast(list[Any], self)))
        for key, value in entries:
            self._child(key, value)

    # writes record their path: a child's, or the node's own

    def _record(self, key: Any) -> None:
        self._ys_log.record(self._ys_link, key)

    def _record_self(self) -> None:
        self._ys_log.record(self._ys_link, own=True)

    def _placed(self, key: Any, value: Any, *, keyed: bool = False) -> None:
        self._ys_log.placed(self._ys_link, key, value, keyed=keyed)


class TrackedDict(_TrackedNode, dict[str, Any]):
    """A ``dict`` in an updater's draft that records the paths written through it."""

    __slots__ = ("_ys_link", "_ys_log")
    _base = dict

    def __getitem__(self, key: str) -> Any:
        return self._child(key, dict.__getitem__(self, key))

    def get(self, key: str, default: Any = None) -> Any:
        if dict.__contains__(self, key):
            return self._child(key, dict.__getitem__(self, key))
        return default

    def __iter__(self) -> Iterator[str]:
        # Overriding __iter__ makes dict(draft) and {**draft} read through __getitem__.
        return dict.__iter__(self)

    def values(self) -> Any:
        self._adopt_all()
        return dict.values(self)

    def items(self) -> Any:
        self._adopt_all()
        return dict.items(self)

    def copy(self) -> dict[str, Any]:
        self._adopt_all()
        return dict(dict.items(self))

    def __or__(self, other: Any) -> dict[str, Any]:  # type: ignore[override]
        result = self.copy()
        result.update(other)
        return result

    def __ror__(self, other: Any) -> dict[str, Any]:  # type: ignore[override]
        self._adopt_all()
        return {**other, **dict(dict.items(self))}

    # writes record their path

    def __setitem__(self, key: str, value: Any) -> None:
        self._record(key)
        self._placed(key, value, keyed=True)
        dict.__setitem__(self, key, value)

    def __delitem__(self, key: str) -> None:
        dict.__delitem__(self, key)
        self._record(key)

    def pop(self, key: str, *default: Any) -> Any:
        if dict.__contains__(self, key):
            self._record(key)
        return dict.pop(self, key, *default)

    def popitem(self) -> tuple[str, Any]:
        key, value = dict.popitem(self)
        self._record(key)
        return key, value

    def setdefault(self, key: str, default: Any = None) -> Any:
        if dict.__contains__(self, key):
            return self._child(key, dict.__getitem__(self, key))
        self[key] = default
        return default

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def clear(self) -> None:
        if self:
            self._record_self()
        dict.clear(self)

    def __ior__(self, other: Any) -> TrackedDict:  # type: ignore[override]
        self.update(other)
        return self

    def __reduce_ex__(self, protocol: SupportsIndex) -> tuple[Any, ...]:
        return (dict, (self.copy(),))


class TrackedList(_TrackedNode, list[Any]):
    """A ``list`` in an updater's draft that records the paths written through it."""

    __slots__ = ("_ys_link", "_ys_log")
    _base = list

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(len(self))[index]]
        position = self._normalize(index)
        return self._child(position, list.__getitem__(self, index))

    def __iter__(self) -> Iterator[Any]:
        self._adopt_all()
        return list.__iter__(self)

    def __reversed__(self) -> Iterator[Any]:
        self._adopt_all()
        return list.__reversed__(self)

    def copy(self) -> list[Any]:
        self._adopt_all()
        return list(list.__iter__(self))

    def __add__(self, other: Any) -> list[Any]:
        return self.copy() + list(other)

    def __radd__(self, other: Any) -> list[Any]:
        return list(other) + self.copy()

    def __mul__(self, count: SupportsIndex) -> list[Any]:
        return self.copy() * count

    __rmul__ = __mul__

    # writes record their paths

    def _normalize(self, index: SupportsIndex) -> int:
        i = index.__index__()
        return i + len(self) if i < 0 else i

    def __setitem__(self, index: Any, value: Any) -> None:
        if isinstance(index, slice):
            values = list(value)
            positions = range(len(self))[index]
            if index.step is not None and index.step != 1:  # an extended slice: in place
                indices: Iterable[int] = positions
            else:  # a splice: the values land from the slice's start on
                start = max(index.indices(len(self))[0], 0)
                indices = range(start, start + len(values))
            for position, item in zip(indices, values, strict=False):
                self._placed(position, item)
            list.__setitem__(self, index, values)
            self._record_self()
            return
        position = self._normalize(index)
        list.__setitem__(self, index, value)
        self._placed(position, value)
        self._record(position)

    def __delitem__(self, index: Any) -> None:
        size = len(self)
        if isinstance(index, slice):
            list.__delitem__(self, index)
            self._record_self()
            return
        position = self._normalize(index)
        list.__delitem__(self, index)
        if position == size - 1:
            self._record(position)
        else:
            self._record_self()

    def append(self, value: Any) -> None:
        self._record(len(self))
        self._placed(len(self), value)
        list.append(self, value)

    def extend(self, values: Iterable[Any]) -> None:
        items = list(values)
        start = len(self)
        for offset, item in enumerate(items):
            self._record(start + offset)
            self._placed(start + offset, item)
        list.extend(self, items)

    def insert(self, index: SupportsIndex, value: Any) -> None:
        size = len(self)
        position = index.__index__()
        if position < 0:
            position = max(position + size, 0)
        if position >= size:
            position = size
            self._record(size)
        else:
            self._record_self()
        self._placed(position, value)
        list.insert(self, index, value)

    def pop(self, index: SupportsIndex = -1) -> Any:
        size = len(self)
        position = self._normalize(index)
        value = list.pop(self, index)
        if position == size - 1:
            self._record(position)
        else:
            self._record_self()
        return value

    def remove(self, value: Any) -> None:
        list.remove(self, value)
        self._record_self()

    def clear(self) -> None:
        if self:
            self._record_self()
        list.clear(self)

    def sort(self, *args: Any, **kwargs: Any) -> None:
        # First: a comparison that fails midway leaves the list partly sorted.
        self._record_self()
        list.sort(self, *args, **kwargs)

    def reverse(self) -> None:
        list.reverse(self)
        self._record_self()

    def __iadd__(self, values: Iterable[Any]) -> TrackedList:  # type: ignore[misc]
        self.extend(values)
        return self

    def __imul__(self, count: SupportsIndex) -> TrackedList:
        # Adopt first: the copies must share one tracked node, as a list's copies share
        # their element (adoption later would replace one reference only).
        self._adopt_all()
        self._record_self()
        list.__imul__(self, count)
        return self

    def __reduce_ex__(self, protocol: SupportsIndex) -> tuple[Any, ...]:
        return (list, (self.copy(),))


def build_draft(state: Any, log: WriteLog) -> Any:
    """A draft over ``state`` (fresh decoded values, consumed): O(size of the root)."""
    return _adopt(log, state, None, None)


def detach(draft: Any) -> Any:
    """A plain ``dict``/``list`` structure equal to ``draft``, for encoding.

    Walks only tracked nodes (containers never reached stay as they are); returns ``draft``
    itself when it holds a reference cycle through tracked nodes, for the durability check
    to report.
    """
    if not isinstance(draft, (TrackedDict, TrackedList)):
        return draft
    active: set[int] = set()

    def plain(node: Any, depth: int) -> Any:
        if type(node) is not TrackedDict and type(node) is not TrackedList:
            return node
        if id(node) in active or depth > 10_000:
            raise _Cycle
        active.add(id(node))
        out: Any
        if type(node) is TrackedDict:
            out = {k: plain(v, depth + 1) for k, v in dict.items(node)}
        else:
            out = [plain(v, depth + 1) for v in list.__iter__(node)]  # type: ignore[arg-type]
        active.discard(id(node))
        return out

    try:
        return plain(draft, 0)
    except (_Cycle, RecursionError):
        return draft


class _Cycle(Exception):
    pass
