"""Durable values (``docs/concepts/stores.md``): what may be stored, and its canonical encoding.

A durable value is ``None``, ``bool``, ``int``, finite ``float``, ``str``, ``list`` or
``tuple`` (read back as ``list``), or ``dict`` with ``str`` keys, nested at most
``max_depth`` deep, of at most ``max_nodes`` values and encoding to at most
``max_bytes``. Strings and keys must not hold
``"\\x00"`` or lone surrogates; integers have at most ``MAX_INT_DIGITS`` decimal digits
(Python's default conversion limit, fixed here so every process can read what another
wrote). The canonical encoding is JSON with sorted keys and no
insignificant white space, kept as text so numbers read back exactly (``1e20`` stays a
float, ``2**70`` an int).

Every list, dict, string, number, boolean and ``None`` in a value is one of its values (a
dict's keys are not counted apart from their values). The limit on their number bounds
what a value costs as Python objects, which the byte limit alone does not: 8 MiB of empty
lists are millions of objects. ``count_json_values`` counts them in a JSON text without
decoding it.

Validation is iterative and bounded by the size and value limits, so a cycle, 100,000 levels of
nesting or a shared-reference bomb is a ``WorkflowValueError``, never a ``RecursionError``
or a hang.
"""

from __future__ import annotations

import gc
import json
import math
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

from .changes import PathLink
from .errors import WorkflowValueError, format_path
from .types import PathSegment, StorePath

INVALID_STEP_VALUE: Final = "INVALID_STEP_VALUE"

#: The most decimal digits a durable integer may have.
MAX_INT_DIGITS: Final = 4300
# Integers of at most this many bits have fewer than MAX_INT_DIGITS digits (log10(2) < 0.302).
_SAFE_INT_BITS: Final = int((MAX_INT_DIGITS - 1) / 0.302)

_SURROGATE = re.compile("[\ud800-\udfff]")
_NoneType = type(None)


#: The default of ``DurableLimits.max_nodes`` (and of the ``MAX_STATE_NODES`` setting).
DEFAULT_MAX_NODES: Final = 500_000


@dataclass(frozen=True)
class DurableLimits:
    """Limits on durable values: nesting depth, encoded size in bytes (UTF-8) and the
    number of values (see the module's docstring)."""

    max_bytes: int = 8 * 1024 * 1024
    max_depth: int = 256
    max_nodes: int = DEFAULT_MAX_NODES


DEFAULT_LIMITS: Final = DurableLimits()

# A linked list of (segment, parent) so a path is only built when an error names it; it
# may end in the ``PathLink`` of a draft's node (the place of a value checked inside it).
_PathNode = tuple[PathSegment, "_PathNode"] | PathLink | None


def _path_of(node: _PathNode) -> StorePath:
    segments: list[PathSegment] = []
    while isinstance(node, tuple):
        segments.append(node[0])
        node = node[1]
    base = node.path() if node is not None else ()
    return base + tuple(reversed(segments))


def _fail(label: str, step_key: str, node: _PathNode, reason: str) -> WorkflowValueError:
    path = _path_of(node)
    where = f" at {format_path(path)}" if path else ""
    return WorkflowValueError(
        INVALID_STEP_VALUE, step_key, f"{label} is not a durable value{where}: {reason}", path=path
    )


class OversizedInt:
    """A JSON integer literal longer than ``MAX_INT_DIGITS`` digits, as a parser that must
    not fail (the API's) reads it: never durable, so storing it is a ``WorkflowValueError``
    naming its path."""

    __slots__ = ("digits",)

    def __init__(self, digits: int) -> None:
        self.digits = digits

    def __repr__(self) -> str:
        return f"<integer of {self.digits} digits>"


def parse_json_int(text: str) -> int | OversizedInt:
    """``json.loads``'s ``parse_int`` that reads an over-long literal as ``OversizedInt``."""
    digits = len(text.lstrip("-"))
    return OversizedInt(digits) if digits > MAX_INT_DIGITS else int(text)


def _int_problem(value: int) -> str | None:
    """Why ``value`` is too long to be durable, or None. O(1) below ``_SAFE_INT_BITS``."""
    if value.bit_length() <= _SAFE_INT_BITS:
        return None
    try:
        digits = len(str(abs(value)))
    except ValueError:  # longer than the interpreter's conversion limit
        digits = -1
    if digits == -1 or digits > MAX_INT_DIGITS:
        return f"integers have at most {MAX_INT_DIGITS} digits"
    return None


def _check_text(text: str) -> str | None:
    if "\x00" in text:
        return 'strings cannot hold "\\x00"'
    if _SURROGATE.search(text):
        return "strings cannot hold lone surrogates"
    return None


def check_durable(
    value: Any,
    *,
    limits: DurableLimits = DEFAULT_LIMITS,
    step_key: str = "",
    label: str = "Value",
    at: StorePath = (),
) -> None:
    """Raise ``WorkflowValueError`` (``INVALID_STEP_VALUE``) unless ``value`` is durable.

    ``at`` places ``value`` inside a larger value: depth and error paths count from the root.
    Work is bounded by ``limits.max_bytes``: every node counts at least one byte.
    """
    start: _PathNode = None
    for segment in at:
        start = (segment, start)
    with collector_paused():
        _check(value, limits, step_key, label, start, len(at))


def _check(
    value: Any, limits: DurableLimits, step_key: str, label: str, start: _PathNode, depth: int
) -> None:
    """``check_durable`` of ``value`` placed at ``start`` (``depth`` segments deep).

    Depth first, children in order, with one frame per open container (its children's
    iterator): memory follows the depth, not the width, and a scalar costs no allocation
    (its path is built only for an error)."""
    budget = limits.max_bytes
    nodes = limits.max_nodes
    max_depth = limits.max_depth
    # Each frame: the open container's children as (key, child) pairs, its own path node,
    # its children's depth, its id (on the path while open), whether its keys are dict keys.
    frames: list[tuple[Iterator[tuple[Any, Any]], _PathNode, int, int, bool]] = []
    on_path: set[int] = set()
    current: Any = value
    key: Any = None
    parent: _PathNode = None
    node: _PathNode = start  # the current value's path node, when it is the root
    while True:
        kind = type(current)
        budget -= 1
        nodes -= 1
        if nodes < 0:
            raise _fail(label, step_key, None, _too_many(limits))
        if kind is str:
            budget -= len(current)
            problem = _check_text(current)
            if problem:
                raise _fail(label, step_key, node if not frames else (key, parent), problem)
        elif kind is bool or kind is _NoneType:
            pass
        elif kind is int:
            problem = _int_problem(current)
            if problem:
                raise _fail(label, step_key, node if not frames else (key, parent), problem)
        elif kind is float:
            if not math.isfinite(current):
                where = node if not frames else (key, parent)
                raise _fail(label, step_key, where, f"{current!r} is not a finite number")
        elif (kind is list or kind is dict) and not current and depth < max_depth:
            pass  # empty: nothing inside, no cycle through it
        elif issubclass(kind, (dict, list, tuple)):  # a selector's view only passes isinstance
            here = node if not frames else (key, parent)
            if depth >= max_depth:
                raise _fail(label, step_key, here, f"nesting is deeper than {max_depth} levels")
            ident = id(current)
            if ident in on_path:
                raise _fail(label, step_key, here, "it contains a reference cycle")
            on_path.add(ident)
            if issubclass(kind, dict):
                pairs = iter(_pairs(current, kind, label, step_key, here))
                frames.append((pairs, here, depth + 1, ident, True))
            else:
                frames.append((enumerate(current), here, depth + 1, ident, False))
        elif kind is OversizedInt:
            where = node if not frames else (key, parent)
            raise _fail(label, step_key, where, f"integers have at most {MAX_INT_DIGITS} digits")
        else:
            where = node if not frames else (key, parent)
            raise _fail(label, step_key, where, f"{kind.__name__} values are not durable")
        if budget < 0:
            raise _fail(label, step_key, None, _too_large(limits))
        # The next value: the next child of the innermost open container.
        while frames:
            children, parent, depth, ident, keyed = frames[-1]
            pair = next(children, None)
            if pair is None:
                frames.pop()
                on_path.discard(ident)
                continue
            key, current = pair
            if keyed:
                if type(key) is not str:
                    raise _fail(
                        label,
                        step_key,
                        parent,
                        f"dict keys must be str, not {type(key).__name__} ({key!r})",
                    )
                budget -= len(key) + 3
                problem = _check_text(key)
                if problem:
                    raise _fail(label, step_key, (key, parent), f"key {problem[8:]}")
            break
        else:
            return


def _pairs(mapping: dict[Any, Any], kind: type, label: str, step_key: str, node: _PathNode) -> Any:
    """The pairs ``json`` encodes: a subclass's own ``items()``, which may differ."""
    if kind is dict:
        return dict.items(mapping)
    try:
        pairs = list(mapping.items())
    except Exception as exc:
        raise _fail(
            label, step_key, node, f"{kind.__name__}.items() raised {type(exc).__name__}"
        ) from None
    if not all(type(pair) is tuple and len(pair) == 2 for pair in pairs):
        raise _fail(label, step_key, node, f"{kind.__name__}.items() did not return pairs")
    return pairs


def _too_large(limits: DurableLimits) -> str:
    return f"its encoding is larger than the limit of {limits.max_bytes} bytes"


def _too_many(limits: DurableLimits) -> str:
    return f"it holds more than the limit of {limits.max_nodes} values"


# A JSON string (of a text that may not be JSON: it never fails, and backtracks nowhere).
_STRING_BYTES: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_STRING_TEXT: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
# A stretch of a text (from outside a string) of at most ``_CHUNK_TOKENS`` runs without
# quotes and whole strings: it ends outside a string, at a quote or past a string.
_CHUNK_TOKENS: Final = 4096
_CHUNK_BYTES: Final = re.compile(
    rb'(?:[^"]++|"[^"\\]*+(?:\\.[^"\\]*+)*+")' + b"{1,%d}+" % _CHUNK_TOKENS
)
_CHUNK_TEXT: Final = re.compile(
    r'(?:[^"]++|"[^"\\]*+(?:\\.[^"\\]*+)*+")' + f"{{1,{_CHUNK_TOKENS}}}+"
)
_BLANKS: Final = b" \t\n\r"


def count_json_values(text: str | bytes) -> int:
    """How many values (as ``DurableLimits.max_nodes`` counts them) the JSON ``text``
    holds, without decoding it: a few passes of the C string functions, no object per
    value. Every value but the first follows a comma or opens a non-empty container, so it
    is the commas and the non-empty containers outside strings, plus one. For a text that
    is not JSON the result is some number (its decoding fails anyway); never more than
    ``len(text)``, so a text that short needs no count.

    Strings are replaced by one character first (a value still) and white space dropped.
    A text of many strings is counted a stretch at a time (``_CHUNK_TOKENS`` strings at
    most): replacing its strings at once would hold a piece per string, many times the
    text's size."""
    quotes = text.count('"') if isinstance(text, str) else text.count(b'"')
    if quotes < 2 * _CHUNK_TOKENS:
        return 1 + _count_bare(text)
    chunk = _CHUNK_TEXT if isinstance(text, str) else _CHUNK_BYTES
    source: str | memoryview = text if isinstance(text, str) else memoryview(text)
    total, pos, size = 1, 0, len(text)
    while pos < size:
        match = chunk.match(text, pos)  # type: ignore[arg-type]
        end = match.end() if match is not None and match.end() > pos else size
        total += _count_bare(source[pos:end])
        pos = end
    return total


def _count_bare(text: str | bytes | memoryview) -> int:
    """The commas and the non-empty containers outside the strings of ``text``, a
    stretch that starts and ends outside strings."""
    if isinstance(text, str):
        bare_text = _STRING_TEXT.sub("0", text)
        if bare_text.isascii() and not any(blank in bare_text for blank in " \t\n\r"):
            opened = bare_text.count("[") + bare_text.count("{")
            empty = bare_text.count("[]") + bare_text.count("{}")
            return bare_text.count(",") + opened - empty
        text = bare_text.encode("utf-8", "surrogatepass")
    # Each string becomes one character (a value still), then white space goes.
    bare = _STRING_BYTES.sub(b"0", text).translate(None, _BLANKS)
    opened = bare.count(b"[") + bare.count(b"{")
    empty = bare.count(b"[]") + bare.count(b"{}")
    return bare.count(b",") + opened - empty


def _dumps(value: Any) -> str:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def _dumps_checked(value: Any, step_key: str, label: str) -> str:
    """``_dumps`` of a checked value: a ``max_depth`` set above what the encoder can recurse
    through is reported as too deep a nesting, not a ``RecursionError``."""
    try:
        return _dumps(value)
    except RecursionError:
        raise _fail(
            label, step_key, None, "it nests too deeply for this interpreter to encode"
        ) from None


def encode_durable(
    value: Any,
    *,
    limits: DurableLimits = DEFAULT_LIMITS,
    step_key: str = "",
    label: str = "Value",
) -> str:
    """Check ``value`` and return its canonical encoding.

    Raises ``WorkflowValueError`` (``INVALID_STEP_VALUE``) naming the offending path.
    """
    check_durable(value, limits=limits, step_key=step_key, label=label)
    return encode_checked(value, limits=limits, step_key=step_key, label=label)


def encode_checked(
    value: Any,
    *,
    limits: DurableLimits = DEFAULT_LIMITS,
    step_key: str = "",
    label: str = "Value",
) -> str:
    """The canonical encoding of ``value``, which ``check_durable`` accepted (with the
    same arguments): ``encode_durable`` in two steps, for a caller with work to do (and
    memory to free) between the check and the encoding."""
    text = _dumps_checked(value, step_key, label)
    if len(text) * 4 > limits.max_bytes and len(text.encode("utf-8")) > limits.max_bytes:
        raise _fail(label, step_key, None, _too_large(limits))
    return text


def encode_placed(
    root: Any,
    placements: Iterable[tuple[PathLink, Any, Any, bool]],
    *,
    limits: DurableLimits = DEFAULT_LIMITS,
    step_key: str = "",
    label: str = "Value",
) -> str:
    """Encode ``root`` checking only the values placed into it.

    For a draft whose other parts were read from storage (so are durable): each placement
    is ``(parent, key, value, keyed)``, a value placed at ``parent`` + ``key``; ``value`` is
    checked as it is now, at that depth, and with ``keyed`` the ``key`` (a dict key the
    caller chose) too. Anything the encoder itself trips over falls back to the full check,
    so errors are the same as ``encode_durable``'s.
    """
    with collector_paused():
        for parent, key, value, keyed in placements:
            if keyed:
                problem = (
                    f"dict keys must be str, not {type(key).__name__} ({key!r})"
                    if type(key) is not str
                    else _check_text(key)
                )
                if problem:
                    raise _fail(label, step_key, parent, problem)
            _check(value, limits, step_key, label, (key, parent), parent.depth + 1)
    try:
        text = _dumps(root)
    except (TypeError, ValueError, RecursionError):
        return encode_durable(root, limits=limits, step_key=step_key, label=label)
    if len(text) * 4 > limits.max_bytes and len(text.encode("utf-8")) > limits.max_bytes:
        raise _fail(label, step_key, None, _too_large(limits))
    if len(text) > limits.max_nodes and count_json_values(text) > limits.max_nodes:
        raise _fail(label, step_key, None, _too_many(limits))
    return text


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a durable value")


#: A JSON decoder that refuses ``NaN`` and the infinities (not durable values).
DURABLE_DECODER: Final = json.JSONDecoder(parse_constant=_reject_constant)


#: Texts longer than this are decoded with the cyclic garbage collector paused.
_QUIET_DECODE_CHARS: Final = 64 * 1024


@contextmanager
def collector_paused(size: int | None = None) -> Iterator[None]:
    """Pause the cyclic garbage collector for work that makes no reference cycle and may
    allocate millions of objects (decoding a JSON text of ``size`` characters, when it is
    large; walking a value): the collections they would trigger, each walking every object
    alive, cost more than the work itself. Only a caller that paused it resumes it."""
    paused = (size is None or size > _QUIET_DECODE_CHARS) and gc.isenabled()
    if paused:
        gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def decode_durable(text: str | bytes) -> Any:
    """Decode a canonical encoding into fresh plain ``dict``/``list`` values."""
    with collector_paused(len(text)):
        return json.loads(text, parse_constant=_reject_constant)


def clone_durable(value: Any, *, limits: DurableLimits = DEFAULT_LIMITS) -> Any:
    """A fresh copy of ``value`` exactly as storage would read it back."""
    return decode_durable(encode_durable(value, limits=limits))


__all__ = [
    "DEFAULT_LIMITS",
    "DEFAULT_MAX_NODES",
    "DURABLE_DECODER",
    "INVALID_STEP_VALUE",
    "MAX_INT_DIGITS",
    "DurableLimits",
    "OversizedInt",
    "check_durable",
    "clone_durable",
    "count_json_values",
    "decode_durable",
    "encode_checked",
    "encode_durable",
    "encode_placed",
    "parse_json_int",
]
