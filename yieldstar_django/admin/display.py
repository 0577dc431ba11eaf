"""Rendering helpers of the admin: JSON a person can read, and diffs capped in length.

A column is decoded with :func:`decoded`: text that does not decode (a row written by hand
or by another program) becomes :class:`Undecodable`, which every helper here shows as the
raw text marked "not valid JSON", so that odd data never makes a page fail.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from ..core.durable import decode_durable
from ..core.errors import format_path

#: Characters of pretty-printed JSON shown before "… (N more characters)".
MAX_PRETTY_CHARS: Final = 200_000
#: Lines of a diff shown before "… (N more lines)".
MAX_DIFF_LINES: Final = 60
#: Characters of one diff line shown, the last one an ellipsis when cut.
MAX_DIFF_LINE_CHARS: Final = 300
#: Characters of one value shown in a list column.
MAX_SHORT_CHARS: Final = 80
#: How a column whose text does not decode is marked.
NOT_JSON: Final = "not valid JSON"


@dataclass(frozen=True)
class Undecodable:
    """The text of a JSON column that does not decode, shown as stored."""

    text: str


def decoded(text: str, decode: Callable[[str], Any] = decode_durable) -> Any:
    """``decode(text)``, or ``Undecodable(text)`` when ``text`` does not decode (nor make
    what ``decode`` builds: malformed, a constant such as ``NaN``, an integer past
    Python's digit limit, nesting past the recursion limit)."""
    try:
        return decode(text)
    except (ValueError, TypeError, RecursionError):
        return Undecodable(text)


def decode_paths(text: str) -> list[tuple[Any, ...]]:
    """Paths as a ``changed_paths`` or ``read_paths`` column holds them (a JSON list of
    lists), as tuples."""
    return [tuple(path) for path in json.loads(text)]


def pretty_json(value: Any) -> str:
    """Indented JSON with sorted keys (the canonical order), non-ASCII kept."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def truncate(text: str, limit: int) -> tuple[str, int]:
    """``text`` cut to ``limit`` characters, and how many were cut."""
    if len(text) <= limit:
        return text, 0
    return text[:limit], len(text) - limit


def pretty_block(value: Any, *, limit: int = MAX_PRETTY_CHARS) -> SafeString:
    """A ``<pre>`` block of ``value`` as pretty JSON, capped at ``limit`` characters (an
    ``Undecodable`` as its raw text, marked "not valid JSON")."""
    if isinstance(value, Undecodable):
        text, cut = truncate(value.text, limit)
        block = format_html(
            '<p class="errornote">{} (shown as stored):</p><pre class="yieldstar-json">{}</pre>',
            NOT_JSON,
            text,
        )
    else:
        text, cut = truncate(pretty_json(value), limit)
        block = format_html('<pre class="yieldstar-json">{}</pre>', text)
    if cut:
        return format_html(
            '{}<p class="help">… {} more characters not shown.</p>',
            block,
            cut,
        )
    return block


def ellipsize(text: str, limit: int = MAX_SHORT_CHARS) -> str:
    """``text`` cut to ``limit`` characters, the last one an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def short_json(value: Any, *, limit: int = MAX_SHORT_CHARS) -> str:
    """Compact JSON on one line, cut to ``limit`` characters with an ellipsis (an
    ``Undecodable`` as its raw text after "not valid JSON: ")."""
    if isinstance(value, Undecodable):
        return ellipsize(f"{NOT_JSON}: {value.text}", limit)
    return ellipsize(
        json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":")), limit
    )


def format_paths(paths: list[Any] | Undecodable) -> str:
    """Paths as ``$.a[0].b``, comma-separated; ``$`` is the whole state (an
    ``Undecodable`` as its raw text after "not valid JSON: ")."""
    if isinstance(paths, Undecodable):
        return short_json(paths)
    return ", ".join(format_path(tuple(path)) for path in paths) or "—"


def json_diff_lines(
    old: Any, new: Any, *, max_lines: int = MAX_DIFF_LINES
) -> tuple[list[str], int]:
    """Unified diff lines between the pretty JSON of ``old`` and ``new`` (2 lines of
    context), at most ``max_lines`` of them, and how many more there were."""
    lines = list(
        difflib.unified_diff(
            pretty_json(old).splitlines(),
            pretty_json(new).splitlines(),
            lineterm="",
            n=2,
        )
    )[2:]  # drop the ---/+++ header
    return lines[:max_lines], max(0, len(lines) - max_lines)


def diff_block(old: Any, new: Any, *, max_lines: int = MAX_DIFF_LINES) -> SafeString:
    """An HTML diff (``-`` removed, ``+`` added lines), capped at ``max_lines`` of at most
    ``MAX_DIFF_LINE_CHARS`` characters each; when either side is an ``Undecodable``, that
    side's raw text instead."""
    for side in (new, old):
        if isinstance(side, Undecodable):
            return pretty_block(side)
    lines, more = json_diff_lines(old, new, max_lines=max_lines)
    if not lines:
        return format_html('<span class="help">{}</span>', "no difference")
    classes = {"+": "yieldstar-add", "-": "yieldstar-del", "@": "yieldstar-hunk"}
    body = format_html_join(
        "",
        '<span class="{}">{}</span>',
        (
            (classes.get(line[:1], "yieldstar-ctx"), ellipsize(line, MAX_DIFF_LINE_CHARS))
            for line in lines
        ),
    )
    if more:
        return format_html(
            '<pre class="yieldstar-diff">{}</pre><p class="help">… {} more lines.</p>',
            body,
            more,
        )
    return format_html('<pre class="yieldstar-diff">{}</pre>', body)


__all__ = [
    "MAX_DIFF_LINES",
    "MAX_DIFF_LINE_CHARS",
    "MAX_PRETTY_CHARS",
    "NOT_JSON",
    "Undecodable",
    "decode_paths",
    "decoded",
    "diff_block",
    "ellipsize",
    "format_paths",
    "json_diff_lines",
    "pretty_block",
    "pretty_json",
    "short_json",
    "truncate",
]
