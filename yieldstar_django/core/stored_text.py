"""A stored state's containers read from its JSON text one member at a time.

``StoredContainer`` lets the diff of a replacement (``paths.diff_stored``) walk the old
state without decoding it whole: the containers of its first ``LAZY_LEVELS`` levels are
read member by member, each deeper member decoded alone (by the C scanner) and dropped
once compared, so the old state costs memory of its largest member below those levels,
not of the whole state, beside the new one. A small container that holds no container
(at most ``LEAF_CHARS`` characters: an empty one, a short list of numbers) is decoded in
one call of the scanner, wherever it is: reading it member by member would cost a Python
object and a generator for a few values.

The text is a stored encoding: JSON that ``decode_durable`` accepts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any, Final

from .durable import DURABLE_DECODER
from .types import PathSegment

__all__ = ["LAZY_LEVELS", "LEAF_CHARS", "StoredContainer", "read_to_end", "stored_root"]

#: How many levels of containers are read member by member; deeper ones are decoded whole.
LAZY_LEVELS: Final = 3

#: The longest container text decoded whole above ``LAZY_LEVELS`` when it holds no
#: container (its values cost at most about this many objects).
LEAF_CHARS: Final = 4096

_SPACE = re.compile(r"[ \t\n\r]*")
_STRING = r'"(?:[^"\\]++|\\.)*+"'
# A container holding no container (strings may hold brackets); linear, never backtracks.
_LEAF_TEXT = r'[\[{](?:[^\[\]{}"]++|' + _STRING + r")*+[\]}]"
_LEAF = re.compile(_LEAF_TEXT)
# A run of a list's members, each a scalar or a container nesting at most two levels
# (``[1, {"a": [2]}]``), separated by commas: what ``finish`` checks in one call.
_SHALLOW = r'[\[{](?:[^\[\]{}"]++|' + _STRING + "|" + _LEAF_TEXT + r")*+[\]}]"
_ATOM = r"(?:" + _STRING + r'|[^\[\]{}",: \t\n\r]++|' + _SHALLOW + ")"
_RUN = re.compile(_ATOM + r"(?:[ \t\n\r]*+,[ \t\n\r]*+" + _ATOM + ")*+")
#: The longest run of members ``finish`` checks in one call of the decoder.
RUN_CHARS: Final = 65536
_WHITESPACE: Final = " \t\n\r"


#: The durable decoder's scanner: ``(value, end)`` of the JSON value at an index (C).
_SCAN: Any = DURABLE_DECODER.scan_once  # type: ignore[attr-defined]


def _skip(text: str, pos: int) -> int:
    match = _SPACE.match(text, pos)
    return match.end() if match else pos


class StoredContainer:
    """A dict (``is_dict``) or list of stored text starting at ``start``, read once, in
    order: ``members()`` yields ``(key or index, value)``, a value being a nested
    ``StoredContainer`` within ``levels`` or else decoded. A nested container the reader
    did not finish is skipped when the next member is asked for; ``finish()`` reads what
    is left and returns the position after the container."""

    __slots__ = ("_members", "end", "finishing", "is_dict", "levels", "start", "text")

    def __init__(self, text: str, start: int, levels: int = LAZY_LEVELS) -> None:
        self.text = text
        self.start = start
        self.levels = levels
        self.is_dict = text[start] == "{"
        self.end = -1
        self.finishing = False  # the rest is only checked (``finish``), not yielded
        self._members: Iterator[tuple[PathSegment, Any]] | None = None

    def members(self) -> Iterator[tuple[PathSegment, Any]]:
        if self._members is None:
            self._members = self._read()
        return self._members

    def finish(self) -> int:
        """Read the rest (nothing is kept) and return the position after the container:
        a list's members are checked a run at a time (``_RUN``), by one call of the
        decoder, not one by one."""
        self.finishing = True
        for _ in self.members():
            pass
        return self.end

    def source(self) -> str:
        """The container's own text (read to its end first)."""
        return self.text[self.start : self.finish()]

    def _read(self) -> Iterator[tuple[PathSegment, Any]]:
        try:
            yield from self._members_of_text()
        except IndexError:
            raise ValueError(f"the stored text ends inside the value at {self.start}") from None

    def _members_of_text(self) -> Iterator[tuple[PathSegment, Any]]:
        text, inner, is_dict = self.text, self.levels - 1, self.is_dict
        close = "}" if is_dict else "]"
        scan, scanstring = _SCAN, json.decoder.scanstring  # type: ignore[attr-defined]
        pos = self.start + 1
        if text[pos] in _WHITESPACE:
            pos = _skip(text, pos)
        if text[pos] == close:
            self.end = pos + 1
            return
        key: PathSegment = 0
        while True:
            if is_dict:
                if text[pos] != '"':
                    raise ValueError(f"not a stored key at {pos}")
                key, pos = scanstring(text, pos + 1)
                if text[pos] in _WHITESPACE:
                    pos = _skip(text, pos)
                if text[pos] != ":":
                    raise ValueError(f"no ':' after a stored key at {pos}")
                pos += 1
                if text[pos] in _WHITESPACE:
                    pos = _skip(text, pos)
            if self.finishing and not is_dict and (run := _RUN.match(text, pos, pos + RUN_CHARS)):
                DURABLE_DECODER.decode("[" + run.group() + "]")  # checked, then dropped
                pos = run.end()
            elif inner > 0 and text[pos] in "[{" and not _LEAF.match(text, pos, pos + LEAF_CHARS):
                container = StoredContainer(text, pos, inner)
                yield key, container
                pos = container.finish()
            else:
                try:
                    value, pos = scan(text, pos)
                except StopIteration as exc:  # the C scanner's "no value here"
                    raise ValueError(f"not a stored value at {exc.value}") from None
                yield key, value
            if text[pos] in _WHITESPACE:
                pos = _skip(text, pos)
            if text[pos] != ",":
                if text[pos] != close:
                    raise ValueError(f"not a stored value at {pos}")
                self.end = pos + 1
                return
            pos += 1
            if text[pos] in _WHITESPACE:
                pos = _skip(text, pos)
            if not is_dict:
                key = int(key) + 1


def read_to_end(root: StoredContainer) -> None:
    """Read the rest of the state ``root`` (from ``stored_root``): ``ValueError`` when
    the text does not decode, past the container too."""
    end = _skip(root.text, root.finish())
    if end != len(root.text):
        raise ValueError(f"extra data after the stored value at {end}")


def stored_root(text: str) -> Any:
    """The stored state ``text`` as a ``StoredContainer`` when it is a dict or a list,
    else decoded."""
    pos = _skip(text, 0)
    if text[pos : pos + 1] in ("[", "{"):
        return StoredContainer(text, pos)
    return DURABLE_DECODER.decode(text)
