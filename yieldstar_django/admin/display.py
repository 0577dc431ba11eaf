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
#: Characters of a list of paths shown before "… and N more".
MAX_PATHS_CHARS: Final = 1000
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


#: Indented JSON with sorted keys (the canonical order), non-ASCII kept.
_PRETTY: Final = json.JSONEncoder(indent=2, sort_keys=True, ensure_ascii=False)


def pretty_json(value: Any) -> str:
    """Indented JSON with sorted keys (the canonical order), non-ASCII kept."""
    return _PRETTY.encode(value)


def pretty_json_capped(value: Any, limit: int) -> tuple[str, bool]:
    """The first ``limit`` characters of ``pretty_json(value)``, and whether there is more:
    the encoder stops once it produced them, so the cost follows ``limit``, not ``value``."""
    parts: list[str] = []
    size = 0
    for chunk in _PRETTY.iterencode(value):
        parts.append(chunk)
        size += len(chunk)
        if size > limit:
            return "".join(parts)[:limit], True
    return "".join(parts), False


def truncate(text: str, limit: int) -> tuple[str, int]:
    """``text`` cut to ``limit`` characters, and how many were cut."""
    if len(text) <= limit:
        return text, 0
    return text[:limit], len(text) - limit


def pretty_block(value: Any, *, limit: int = MAX_PRETTY_CHARS) -> SafeString:
    """A ``<pre>`` block of ``value`` as pretty JSON, capped at ``limit`` characters (an
    ``Undecodable`` as its raw text, marked "not valid JSON")."""
    cut = 0
    if isinstance(value, Undecodable):
        text, cut = truncate(value.text, limit)
        block = format_html(
            '<p class="errornote">{} (shown as stored):</p><pre class="yieldstar-json">{}</pre>',
            NOT_JSON,
            text,
        )
    else:
        text, more = pretty_json_capped(value, limit)
        block = format_html('<pre class="yieldstar-json">{}</pre>', text)
        if more:  # how much more is not known: formatting it would cost what the cap saves
            return format_html(
                '{}<p class="help">… the rest is not shown (the first {} characters are).</p>',
                block,
                limit,
            )
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


def format_paths(paths: list[Any] | Undecodable, *, limit: int = MAX_PATHS_CHARS) -> str:
    """Paths as ``$.a[0].b``, comma-separated, ``$`` the whole state, cut after about
    ``limit`` characters with how many paths were left out (an ``Undecodable`` as its raw
    text after "not valid JSON: ")."""
    if isinstance(paths, Undecodable):
        return short_json(paths)
    shown: list[str] = []
    size = 0
    for path in paths:
        if size > limit:
            break
        shown.append(format_path(tuple(path)))
        size += len(shown[-1]) + 2
    text = ellipsize(", ".join(shown), limit) or "—"
    left = len(paths) - len(shown)
    return f"{text} and {left} more" if left else text


def json_diff_lines(
    old: Any, new: Any, *, max_lines: int = MAX_DIFF_LINES
) -> tuple[list[str], int]:
    """Unified diff lines between the pretty JSON of ``old`` and ``new`` (2 lines of
    context, hunks as ``difflib.unified_diff`` writes them), at most ``max_lines`` of them,
    and how many more there were: those are counted, not written."""
    a, b = pretty_json(old).splitlines(), pretty_json(new).splitlines()
    lines: list[str] = []
    more = 0

    def emit(prefix: str, source: list[str], start: int, stop: int) -> None:
        nonlocal more
        room = max(0, min(stop - start, max_lines - len(lines)))
        lines.extend(prefix + line for line in source[start : start + room])
        more += stop - start - room

    for group in difflib.SequenceMatcher(None, a, b).get_grouped_opcodes(2):
        first, last = group[0], group[-1]
        header = f"@@ -{_unified_range(first[1], last[2])} +{_unified_range(first[3], last[4])} @@"
        emit("", [header], 0, 1)
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                emit(" ", a, i1, i2)
                continue
            if tag in ("replace", "delete"):
                emit("-", a, i1, i2)
            if tag in ("replace", "insert"):
                emit("+", b, j1, j2)
    return lines, more


def _unified_range(start: int, stop: int) -> str:
    """A hunk header's range, as ``difflib.unified_diff`` writes it."""
    beginning, length = start + 1, stop - start
    if length == 1:
        return f"{beginning}"
    if not length:
        beginning -= 1
    return f"{beginning},{length}"


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
    "MAX_PATHS_CHARS",
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
    "pretty_json_capped",
    "short_json",
    "truncate",
]
