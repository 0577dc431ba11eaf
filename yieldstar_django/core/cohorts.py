"""Cohorts of waiters: takers that wait on the same function of a store's state.

Two takes whose selectors are the same code with equal captured values decide the same
for the same state: when one of them runs its selector on a version and misses, every
other would miss there too. Such waiters form a **cohort**, and a change that touches
them wakes only the first of them in registration order, the one that checks for all:

- it matches: the commit recording its claim wakes the next of the cohort, whatever the
  claim changed (the others may match the same state);
- it misses: it registers again from what it read, and is woken at once if the store
  moved since (so no change goes unchecked by the cohort);
- it stops waiting without checking (its execution cancelled, or finished otherwise):
  the removal of its woken waiter wakes the next of the cohort in its place.

Items committed one at a time to N takers thus cost about two resumes each, not N/2.

A selector's cohort is a digest of its code (with the code of the functions it captures
or names at module level) and of the values it captured; ``None`` (no cohort: woken with
every other waiter the change touches) when a captured value, default or bound argument
is not a plain value this module can compare (an object, a set, a bound method). Selectors
must be deterministic functions of the state and of what they capture; one that reads
something else (a global that differs between processes, the clock) must not be shared
by takers of one store, or must capture that value.
"""

from __future__ import annotations

import functools
import hashlib
import types
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

__all__ = ["cohort_wakes", "first_of_each_cohort", "selector_cohort"]

T = TypeVar("T")

_PLAIN = (str, int, float, bool, type(None))
_DEPTH = 32


def selector_cohort(selector: Callable[..., Any]) -> str | None:
    """The cohort of ``selector``: equal for two selectors that are the same function of
    the state; ``None`` when that cannot be told."""
    digest = hashlib.blake2b(digest_size=16)
    if not _feed(digest, selector, 0, set()):
        return None
    return digest.hexdigest()


def _feed(digest: Any, fn: Any, depth: int, seen: set[int]) -> bool:
    """Feed a function's code, what it captured, and the code of the module-level
    functions it names; ``False`` if any of it cannot be compared."""
    if depth > _DEPTH:
        return False
    if isinstance(fn, functools.partial):
        digest.update(b"partial")
        return (
            _feed(digest, fn.func, depth + 1, seen)
            and _value(digest, fn.args)
            and _value(digest, fn.keywords)
        )
    if not isinstance(fn, types.FunctionType):
        return False
    if id(fn) in seen:  # recursion: its code is in already
        digest.update(b"again")
        return True
    seen.add(id(fn))
    code = fn.__code__
    if not _code(digest, code, depth):
        return False
    if not (_value(digest, fn.__defaults__) and _value(digest, fn.__kwdefaults__)):
        return False
    for cell in fn.__closure__ or ():
        try:
            content = cell.cell_contents
        except ValueError:  # an empty cell
            return False
        if isinstance(content, types.FunctionType | functools.partial):
            if not _feed(digest, content, depth + 1, seen):
                return False
        elif not _value(digest, content):
            return False
    for name in _names(code):
        called = fn.__globals__.get(name)
        if isinstance(called, types.FunctionType) and not _feed(digest, called, depth + 1, seen):
            return False
    return True


def _code(digest: Any, code: types.CodeType, depth: int) -> bool:
    """Feed what a code object does (its bytecode, constants, names and shape; not its
    line numbers, nor marshal's bytes, which vary with reference counts)."""
    if depth > _DEPTH:
        return False
    digest.update(code.co_code)
    for text in (
        code.co_qualname,
        code.co_filename,
        *code.co_names,
        *code.co_varnames,
        *code.co_freevars,
        *code.co_cellvars,
    ):
        digest.update(text.encode("utf-8", "surrogatepass") + b"\x00")
    shape = (code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_flags)
    digest.update(repr(shape).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            if not _code(digest, const, depth + 1):
                return False
        elif not _value(digest, const):
            return False
    return True


def _names(code: types.CodeType) -> list[str]:
    """The global names ``code`` and the code nested in it use, in order."""
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += _names(const)
    return names


def _value(digest: Any, value: Any) -> bool:
    """Feed a captured value; ``False`` if it is not a plain value."""
    if not _plain(value, 0):
        return False
    digest.update(repr(value).encode("utf-8", "surrogatepass"))
    digest.update(b"\x00")
    return True


def _plain(value: Any, depth: int) -> bool:
    """Whether ``value`` is made of types whose ``repr`` states the value exactly and the
    same in every process (no sets: their order varies with string hashing)."""
    if depth > _DEPTH:
        return False
    if type(value) in _PLAIN:
        return True
    if type(value) in (list, tuple):
        return all(_plain(item, depth + 1) for item in value)
    if type(value) is dict:
        return all(type(k) in _PLAIN and _plain(v, depth + 1) for k, v in value.items())
    return False


def first_of_each_cohort(
    waiters: Iterable[T], cohort: Callable[[T], str | None]
) -> tuple[list[T], dict[str, list[T]]]:
    """Split the waiters a change wakes (in registration order) into those without a
    cohort, all woken, and each cohort's, in order: the change wakes the first of each
    (on PostgreSQL the first whose row is not held by another transaction, and those
    before it unmarked, :func:`cohort_wakes`)."""
    alone: list[T] = []
    cohorts: dict[str, list[T]] = {}
    for waiter in waiters:
        key = cohort(waiter)
        if key is None:
            alone.append(waiter)
        else:
            cohorts.setdefault(key, []).append(waiter)
    return alone, cohorts


def cohort_wakes(members: Sequence[T], mark: Callable[[T], bool]) -> list[T]:
    """The members of one cohort a change wakes: in order, up to and including the first
    that ``mark`` marks woken (``False``: its row is held by another transaction, which
    may be removing it, so it is woken unmarked and the next one is tried)."""
    woken: list[T] = []
    for member in members:
        woken.append(member)
        if mark(member):
            break
    return woken
