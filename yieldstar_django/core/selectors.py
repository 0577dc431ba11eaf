"""Selectors: read-only views of a state that record the paths a selector read.

``track_selector`` runs a selector over ``DictView``/``ListView`` wrappers; every read
(indexing, ``get``, iteration, ``len``, comparisons) records its path, and any attempt to
change the state raises ``SelectorMutationError``. The recorded paths are what a waiter
registers: a later change that touches one of them wakes it (:mod:`.paths`).

A view passes ``isinstance(view, dict)`` (``list``) as the container it stands for, while
``type(view)`` stays ``DictView`` (``ListView``): its ``__class__`` is a ``dict`` (``list``)
subclass that bears the view's name, as ``unittest.mock`` answers for a spec. Code that
must tell a view from a plain container looks at ``type()`` (the views' wrapping, the
durability check) or tests for a ``ReadView`` first (unwrapping), never ``isinstance(x,
dict)`` alone.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, NoReturn, SupportsIndex, TypeVar

from .paths import collapse_paths
from .types import StorePath

__all__ = [
    "DictView",
    "ListView",
    "ReadView",
    "SelectorMutationError",
    "track_selector",
    "unwrap_selected",
    "unwrap_view",
]

T = TypeVar("T")


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
        if issubclass(type(value), (dict, list)):
            self.accessed.append(path)
            return self.wrap(value, path)
        self.paths.append(path)
        return value

    def wrap(self, value: Any, path: StorePath) -> Any:
        kind = type(value)  # not isinstance: a view passes for what it stands for
        if issubclass(kind, dict):
            view_type: type[ReadView] = DictView
        elif issubclass(kind, list):
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


def _reported_class(base: type, view_name: str) -> type:
    """The ``__class__`` a view of a ``base`` reports: a subclass of ``base`` named like the
    view (so ``json``'s refusal still names the view), whose call makes a plain ``base``."""

    def new(cls: type, *args: Any, **kwargs: Any) -> Any:
        return base(*args, **kwargs)

    return type(
        view_name,
        (base,),
        {
            "__slots__": (),
            "__new__": new,
            "__module__": __name__,
            "__qualname__": f"{view_name}._ys_class",
            "__doc__": f"What ``isinstance`` sees of a ``{view_name}``: a ``{base.__name__}``.",
        },
    )


class ReadView:
    """Base of the read-only, read-recording views a selector sees."""

    __slots__ = ("_ys_log", "_ys_path", "_ys_target")
    _ys_target: Any
    #: The class ``view.__class__`` answers: a subclass of the builtin the view stands for.
    _ys_class: ClassVar[type]

    def _reported(self) -> type:
        return type(self)._ys_class

    # ``isinstance(view, dict)`` consults ``__class__`` when ``type(view)`` is no ``dict``;
    # ``type(view)``, ``copy`` and ``pickle`` keep seeing the view's own class. Reading it
    # records nothing: stepping into the container recorded its path already, and only a
    # write there or above can change its type.
    __class__ = property(_reported)

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

    def __delattr__(self, name: str) -> NoReturn:
        _refuse()

    def __eq__(self, other: object) -> bool:
        self._read_self()
        return bool(self._ys_target == _read_whole(other))

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        self._read_self()
        return f"{type(self).__name__}({self._ys_target!r})"

    # A copy reads the whole container; a shallow one is the (read-only) view itself.

    def __copy__(self) -> ReadView:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        self._read_self()
        return copy.deepcopy(self._ys_target, memo)

    def __reduce_ex__(self, protocol: SupportsIndex) -> tuple[Any, ...]:
        self._read_self()
        plain = copy.deepcopy(self._ys_target)
        return (type(plain), (plain,))


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


DictView._ys_class = _reported_class(dict, "DictView")


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
        return _read_whole(value) in self._ys_target

    def index(self, value: Any, *args: Any) -> int:
        self._read_self()
        return int(self._ys_target.index(_read_whole(value), *args))

    def count(self, value: Any) -> int:
        self._read_self()
        return int(self._ys_target.count(_read_whole(value)))

    # Lists order element by element (a ``list``'s comparison, reading both whole).

    def __lt__(self, other: object) -> Any:
        self._read_self()
        return self._ys_target.__lt__(_read_whole(other))

    def __le__(self, other: object) -> Any:
        self._read_self()
        return self._ys_target.__le__(_read_whole(other))

    def __gt__(self, other: object) -> Any:
        self._read_self()
        return self._ys_target.__gt__(_read_whole(other))

    def __ge__(self, other: object) -> Any:
        self._read_self()
        return self._ys_target.__ge__(_read_whole(other))

    append = extend = insert = pop = remove = clear = sort = reverse = _refuse


ListView._ys_class = _reported_class(list, "ListView")


def _read_whole(value: Any) -> Any:
    """``unwrap_view(value)`` for a comparison, which reads a view's container whole."""
    if isinstance(value, ReadView):
        value._read_self()
        return value._ys_target
    return value


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
    if not issubclass(type(state), (dict, list)):
        log.paths.append(())  # a scalar state is read whole
    result = selector(log.wrap(state, ()))
    return result, log.read_paths()
