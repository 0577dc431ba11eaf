"""Path tracking (design §5): which parts of a state an updater wrote or a selector read.

* ``build_draft`` wraps a freshly decoded state in ``TrackedDict``/``TrackedList`` nodes that
  record every path written through item assignment, deletion and the in-place ``dict``/
  ``list`` methods, in O(changes). A change that shifts list elements records the list's own
  path. Nodes are adopted lazily: a container of the decoded state becomes a tracked node the
  first time it is reached through the draft (by any read: indexing, ``get``, ``values``,
  ``items``, iteration, slicing, ``copy``, ``+``, ``*``), so building a draft and changing one
  field costs O(path), not O(state).
* Assigned values are stored as given (not walked, copied or adopted): a container placed in
  the draft is covered by the path recorded when it was placed there, so writes through it
  later are covered by prefix.
* ``track_selector`` runs a selector over read-only views that record the paths read.
* ``diff_paths`` is the O(state) structural fallback for replacements and transformed states.
* ``paths_intersect`` is prefix intersection: extra paths cost a spurious wake, missing ones
  would lose a wake, so every rule here errs towards recording more. ``wakes_waiter`` is the
  wake rule every client applies: intersection, or a change at the root ``()``.

Writes that bypass the draft's methods (``dict.__setitem__(draft, ...)``, or C helpers such as
``heapq`` that write a list's internals) are not seen: assign the result instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NoReturn, SupportsIndex, TypeVar

from .types import StorePath

T = TypeVar("T")


class WriteLog:
    """What an updater did to one draft: the paths it wrote, in order, and the values it
    placed (the only parts of the draft that did not come from storage)."""

    __slots__ = ("_assigned", "_paths", "placements")

    def __init__(self) -> None:
        self._paths: list[StorePath] = []
        self._assigned: set[int] = set()
        #: ``(path, value, keyed)`` for every value placed; ``keyed`` when the last path
        #: segment is a dict key the updater chose (so it must be checked too).
        self.placements: list[tuple[StorePath, Any, bool]] = []

    def record(self, path: StorePath) -> None:
        self._paths.append(path)

    def placed(self, path: StorePath, value: Any, *, keyed: bool = False) -> None:
        """Note a value the updater put into the draft at ``path`` (never adopted later)."""
        self.placements.append((path, value, keyed))
        if type(value) is dict or type(value) is list:
            self._assigned.add(id(value))

    def paths(self) -> list[StorePath]:
        """Written paths, deduplicated and with paths covered by a recorded prefix removed."""
        return collapse_paths(self._paths)


def _adopt(log: WriteLog, value: Any, path: StorePath) -> Any:
    """The tracked node for a decoded container ``value`` at ``path``, or ``value`` itself."""
    kind = type(value)
    if kind is dict:
        if id(value) in log._assigned:
            return value
        return TrackedDict(value, path, log)
    if kind is list:
        if id(value) in log._assigned:
            return value
        return TrackedList(value, path, log)
    return value


class TrackedDict(dict[str, Any]):
    """A ``dict`` in an updater's draft that records the paths written through it."""

    __slots__ = ("_ys_log", "_ys_path")

    def __init__(self, data: Mapping[str, Any], path: StorePath, log: WriteLog) -> None:
        dict.__init__(self, data)
        self._ys_path = path
        self._ys_log = log

    # reads adopt the child they return

    def _child(self, key: str, value: Any) -> Any:
        adopted = _adopt(self._ys_log, value, (*self._ys_path, key))
        if adopted is not value:
            dict.__setitem__(self, key, adopted)
        return adopted

    def _adopt_all(self) -> None:
        for key, value in list(dict.items(self)):
            self._child(key, value)

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

    def _record(self, key: Any) -> None:
        self._ys_log.record((*self._ys_path, key))

    def __setitem__(self, key: str, value: Any) -> None:
        self._record(key)
        self._ys_log.placed((*self._ys_path, key), value, keyed=True)
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
            self._ys_log.record(self._ys_path)
        dict.clear(self)

    def __ior__(self, other: Any) -> TrackedDict:  # type: ignore[override]
        self.update(other)
        return self

    def __reduce_ex__(self, protocol: SupportsIndex) -> tuple[Any, ...]:
        return (dict, (self.copy(),))


class TrackedList(list[Any]):
    """A ``list`` in an updater's draft that records the paths written through it."""

    __slots__ = ("_ys_log", "_ys_path")

    def __init__(self, data: Iterable[Any], path: StorePath, log: WriteLog) -> None:
        list.__init__(self, data)
        self._ys_path = path
        self._ys_log = log

    # reads adopt the children they return

    def _child(self, position: int, value: Any) -> Any:
        adopted = _adopt(self._ys_log, value, (*self._ys_path, position))
        if adopted is not value:
            list.__setitem__(self, position, adopted)
        return adopted

    def _adopt_all(self) -> None:
        for position, value in enumerate(list.__iter__(self)):
            self._child(position, value)

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

    def _record_index(self, index: int) -> None:
        self._ys_log.record((*self._ys_path, index))

    def _record_self(self) -> None:
        self._ys_log.record(self._ys_path)

    def _normalize(self, index: SupportsIndex) -> int:
        i = index.__index__()
        return i + len(self) if i < 0 else i

    def __setitem__(self, index: Any, value: Any) -> None:
        if isinstance(index, slice):
            values = list(value)
            start = range(len(self))[index].start if len(self) else 0
            for offset, item in enumerate(values):
                self._ys_log.placed((*self._ys_path, start + offset), item)
            list.__setitem__(self, index, values)
            self._record_self()
            return
        position = self._normalize(index)
        list.__setitem__(self, index, value)
        self._ys_log.placed((*self._ys_path, position), value)
        self._record_index(position)

    def __delitem__(self, index: Any) -> None:
        size = len(self)
        if isinstance(index, slice):
            list.__delitem__(self, index)
            self._record_self()
            return
        position = self._normalize(index)
        list.__delitem__(self, index)
        if position == size - 1:
            self._record_index(position)
        else:
            self._record_self()

    def append(self, value: Any) -> None:
        self._record_index(len(self))
        self._ys_log.placed((*self._ys_path, len(self)), value)
        list.append(self, value)

    def extend(self, values: Iterable[Any]) -> None:
        items = list(values)
        start = len(self)
        for offset, item in enumerate(items):
            self._record_index(start + offset)
            self._ys_log.placed((*self._ys_path, start + offset), item)
        list.extend(self, items)

    def insert(self, index: SupportsIndex, value: Any) -> None:
        size = len(self)
        position = index.__index__()
        if position < 0:
            position = max(position + size, 0)
        if position >= size:
            position = size
            self._record_index(size)
        else:
            self._record_self()
        self._ys_log.placed((*self._ys_path, position), value)
        list.insert(self, index, value)

    def pop(self, index: SupportsIndex = -1) -> Any:
        size = len(self)
        position = self._normalize(index)
        value = list.pop(self, index)
        if position == size - 1:
            self._record_index(position)
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
        list.sort(self, *args, **kwargs)
        self._record_self()

    def reverse(self) -> None:
        list.reverse(self)
        self._record_self()

    def __iadd__(self, values: Iterable[Any]) -> TrackedList:  # type: ignore[misc]
        self.extend(values)
        return self

    def __imul__(self, count: SupportsIndex) -> TrackedList:
        self._record_self()
        list.__imul__(self, count)
        return self

    def __reduce_ex__(self, protocol: SupportsIndex) -> tuple[Any, ...]:
        return (list, (self.copy(),))


def build_draft(state: Any, log: WriteLog) -> Any:
    """A draft over ``state`` (fresh decoded values, consumed): O(size of the root)."""
    return _adopt(log, state, ())


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


# --- selectors -------------------------------------------------------------------------


class SelectorMutationError(TypeError):
    """A selector tried to change the state it was only allowed to read."""


def _refuse(*_args: Any, **_kwargs: Any) -> NoReturn:
    raise SelectorMutationError("Store selectors must not mutate state")


class _ReadLog:
    """Reads of one selector run.

    ``paths`` holds what the selector observed as a value: leaf values, missing keys and
    structural reads of containers. ``accessed`` holds containers it merely stepped into;
    such an access observes only that a container is there, which only a write at that path
    or above can change, so it is kept only when nothing below it was read (a write above
    intersects the deeper read anyway).
    """

    __slots__ = ("accessed", "paths", "views")

    def __init__(self) -> None:
        self.paths: list[StorePath] = []
        self.accessed: list[StorePath] = []
        self.views: dict[int, ReadView] = {}

    def child(self, value: Any, path: StorePath) -> Any:
        """Record reading ``value`` at ``path`` and return what the selector sees."""
        if isinstance(value, (dict, list)):
            self.accessed.append(path)
            return self.wrap(value, path)
        self.paths.append(path)
        return value

    def wrap(self, value: Any, path: StorePath) -> Any:
        if isinstance(value, dict):
            view_type: type[ReadView] = DictView
        elif isinstance(value, list):
            view_type = ListView
        else:
            return value
        cached = self.views.get(id(value))
        if cached is not None and cached._ys_target is value:
            return cached
        view = view_type(value, path, self)
        self.views[id(value)] = view
        return view

    def read_paths(self) -> list[StorePath]:
        observed = set(self.paths) | set(self.accessed)
        extended: set[StorePath] = set()
        for path in observed:
            for n in range(len(path)):
                extended.add(path[:n])
        kept = [path for path in set(self.accessed) if path not in extended]
        return collapse_paths([*self.paths, *kept])


class ReadView:
    """Base of the read-only, read-recording views a selector sees."""

    __slots__ = ("_ys_log", "_ys_path", "_ys_target")
    _ys_target: Any

    def __init__(self, target: Any, path: StorePath, log: _ReadLog) -> None:
        self._ys_target = target
        self._ys_path = path
        self._ys_log = log

    def _read_self(self) -> None:
        self._ys_log.paths.append(self._ys_path)

    def __setitem__(self, key: Any, value: Any) -> NoReturn:
        _refuse()

    def __delitem__(self, key: Any) -> NoReturn:
        _refuse()

    __setattr_allowed__ = frozenset({"_ys_target", "_ys_path", "_ys_log"})

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self.__setattr_allowed__:
            _refuse()
        object.__setattr__(self, name, value)

    def __eq__(self, other: object) -> bool:
        self._read_self()
        return bool(self._ys_target == unwrap_view(other))

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        self._read_self()
        return f"{type(self).__name__}({self._ys_target!r})"


class DictView(ReadView, Mapping[str, Any]):
    """Read-only view of a ``dict`` that records each path read."""

    __slots__ = ()

    def __getitem__(self, key: str) -> Any:
        path = (*self._ys_path, key)
        if not dict.__contains__(self._ys_target, key):
            self._ys_log.paths.append(path)
            raise KeyError(key)
        return self._ys_log.child(self._ys_target[key], path)

    def get(self, key: str, default: Any = None) -> Any:
        path = (*self._ys_path, key)
        if dict.__contains__(self._ys_target, key):
            return self._ys_log.child(self._ys_target[key], path)
        self._ys_log.paths.append(path)
        return default

    def __len__(self) -> int:
        self._read_self()
        return len(self._ys_target)

    def __iter__(self) -> Iterator[str]:
        self._read_self()
        return iter(list(self._ys_target))

    def __contains__(self, key: object) -> bool:
        self._read_self()
        return key in self._ys_target

    def keys(self) -> Any:
        self._read_self()
        return list(self._ys_target)

    def values(self) -> Any:
        self._read_self()
        wrap, base = self._ys_log.wrap, self._ys_path
        return [wrap(v, (*base, k)) for k, v in self._ys_target.items()]

    def items(self) -> Any:
        self._read_self()
        wrap, base = self._ys_log.wrap, self._ys_path
        return [(k, wrap(v, (*base, k))) for k, v in self._ys_target.items()]

    pop = popitem = setdefault = update = clear = _refuse


class ListView(ReadView, Sequence[Any]):
    """Read-only view of a ``list`` that records each path read."""

    __slots__ = ()

    def __getitem__(self, index: Any) -> Any:
        target = self._ys_target
        if isinstance(index, slice):
            self._read_self()
            positions = range(len(target))[index]
            return [self._ys_log.wrap(target[i], (*self._ys_path, i)) for i in positions]
        position = index.__index__()
        size = len(target)
        if position < 0:
            self._read_self()  # the answer depends on the length
            position += size
        if not 0 <= position < size:
            self._read_self()
            raise IndexError("list index out of range")
        return self._ys_log.child(target[position], (*self._ys_path, position))

    def __len__(self) -> int:
        self._read_self()
        return len(self._ys_target)

    def __iter__(self) -> Iterator[Any]:
        self._read_self()
        wrap, base = self._ys_log.wrap, self._ys_path
        return iter([wrap(v, (*base, i)) for i, v in enumerate(self._ys_target)])

    def __reversed__(self) -> Iterator[Any]:
        items: list[Any] = list(self.__iter__())
        return iter(items[::-1])

    def __contains__(self, value: object) -> bool:
        self._read_self()
        return unwrap_view(value) in self._ys_target

    def index(self, value: Any, *args: Any) -> int:
        self._read_self()
        return int(self._ys_target.index(unwrap_view(value), *args))

    def count(self, value: Any) -> int:
        self._read_self()
        return int(self._ys_target.count(unwrap_view(value)))

    append = extend = insert = pop = remove = clear = sort = reverse = _refuse


def unwrap_view(value: Any) -> Any:
    """The object a read view stands for; other values unchanged."""
    if isinstance(value, ReadView):
        return value._ys_target
    return value


def unwrap_selected(value: Any, *, max_depth: int = 256) -> Any:
    """Replace read views in a selector's result by the draft nodes they view.

    A view returned directly unwraps to the draft node itself, so a claim that mutates it
    mutates the draft (and is recorded). Views inside a container the selector built are
    replaced in a shallow-rebuilt copy of that container.
    """
    if isinstance(value, ReadView):
        return value._ys_target
    if not isinstance(value, (list, tuple, dict)):
        return value

    def rebuild(current: Any, depth: int, active: frozenset[int]) -> Any:
        if isinstance(current, ReadView):
            return current._ys_target
        if depth > max_depth or id(current) in active:
            return current  # left for the durability check to reject
        inner = active | {id(current)}
        if isinstance(current, dict):
            return {k: rebuild(v, depth + 1, inner) for k, v in current.items()}
        if isinstance(current, list):
            return [rebuild(v, depth + 1, inner) for v in current]
        if isinstance(current, tuple):
            return tuple(rebuild(v, depth + 1, inner) for v in current)
        return current

    return rebuild(value, 0, frozenset())


def track_selector(state: Any, selector: Callable[[Any], T]) -> tuple[T, list[StorePath]]:
    """Run ``selector`` over a read-recording view of ``state``; return its result and reads."""
    log = _ReadLog()
    if not isinstance(state, (dict, list)):
        log.paths.append(())  # a scalar state is read whole
    result = selector(log.wrap(state, ()))
    return result, log.read_paths()


# --- diff and intersection -------------------------------------------------------------


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

    Every client applies this rule (the database ones through ``path_match``).
    """
    changed = [tuple(path) for path in changed_paths]
    return changes_root(changed) or paths_intersect(read_paths, changed)


__all__ = [
    "DictView",
    "ListView",
    "ReadView",
    "SelectorMutationError",
    "TrackedDict",
    "TrackedList",
    "WriteLog",
    "build_draft",
    "changes_root",
    "collapse_paths",
    "detach",
    "diff_paths",
    "paths_intersect",
    "track_selector",
    "unwrap_selected",
    "unwrap_view",
    "wakes_waiter",
]
