"""``Decoded``: a model attribute read as the decoding of one of its text columns."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Self, TypeVar, overload

T = TypeVar("T")

__all__: list[str] = []  # used by the model modules, not exported with the models


class Decoded(Generic[T]):
    """A read-only attribute like a ``property``: ``decode(<the column's text>)`` on every
    read (nothing is cached, so it follows the column), the descriptor itself on the class.
    Assigning it raises ``AttributeError``: write the column instead."""

    def __init__(self, column: str, decode: Callable[[Any], T], doc: str) -> None:
        self.column = column
        self.decode = decode
        self.__doc__ = doc

    @overload
    def __get__(self, obj: None, owner: type[Any] | None = None) -> Self: ...

    @overload
    def __get__(self, obj: object, owner: type[Any] | None = None) -> T: ...

    def __get__(self, obj: object | None, owner: type[Any] | None = None) -> Self | T:
        if obj is None:
            return self
        return self.decode(getattr(obj, self.column))

    def __set__(self, obj: object, value: Any) -> None:
        raise AttributeError(f"read-only: set {self.column!r} instead")
