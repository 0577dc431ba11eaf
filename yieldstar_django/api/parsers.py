"""Request parsers that cannot be made to fail with a ``500``.

They read at most ``API_MAX_BODY_BYTES`` + 1 bytes (more is ``413``), refuse a body
holding more than ``MAX_STATE_NODES`` + ``BODY_NODE_SLACK`` values (``413``, counted in
its bytes before anything is decoded, so a body of millions of empty lists costs no object
per list), require UTF-8,
reject ``NaN``/``Infinity``, numbers out of float range and nesting deeper than
``MAX_DEPTH`` + ``PATCH_DEPTH_SLACK``, and turn every decoding failure (including
``RecursionError``) into a ``400`` ``ParseError``. An integer longer than
``MAX_INT_DIGITS`` digits is the ``WorkflowValueError`` (``INVALID_STEP_VALUE``, a ``400``
``not_durable``) that storing it would be, naming its path in the body.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import IO, Any, Final

from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser

from ..conf import yieldstar_settings
from ..core.durable import (
    MAX_INT_DIGITS,
    OversizedInt,
    collector_paused,
    count_json_values,
    parse_json_int,
)
from ..core.errors import WorkflowValueError, format_path
from ..core.types import StorePath
from .exceptions import RequestTooLarge
from .jsonvalue import json_depth

#: Levels a patch document may add over a state's nesting (the array and its operation).
PATCH_DEPTH_SLACK: Final = 2
#: Values a body may hold over ``MAX_STATE_NODES``: a patch document's own (its array, an
#: operation and its members), around a value at the limit.
BODY_NODE_SLACK: Final = 16

MERGE_PATCH: Final = "application/merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def loads_json(raw: bytes, *, max_depth: int, max_values: int | None = None) -> Any:
    """Decode a UTF-8 JSON document or raise ``ParseError`` saying what is wrong;
    ``RequestTooLarge`` when it holds more than ``max_values`` values (counted first).
    ``raw`` is dropped once decoded to text: pass it as a temporary (as ``parse`` does),
    and the bytes are not held beside the values."""
    if max_values is not None and len(raw) > max_values:
        values = count_json_values(raw)
        if values > max_values:
            raise RequestTooLarge(
                f"The request body holds {values} JSON values; at most {max_values} are "
                "accepted (MAX_STATE_NODES)."
            )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ParseError(f"The body is not UTF-8: {exc.reason} at byte {exc.start}.") from None
    del raw  # the bytes go before the decoded values come
    oversized = False

    def parse_int(digits: str) -> Any:
        nonlocal oversized
        number = parse_json_int(digits)
        oversized = oversized or type(number) is OversizedInt
        return number

    try:
        with collector_paused(len(text)):
            value = json.loads(
                text,
                parse_constant=_reject_constant,
                parse_float=_finite_float,
                parse_int=parse_int,
            )
    except RecursionError:
        raise ParseError(f"The JSON nests deeper than {max_depth} levels.") from None
    except ValueError as exc:  # JSONDecodeError, NaN/Infinity
        raise ParseError(f"Malformed JSON: {exc}") from None
    if json_depth(value, limit=max_depth) > max_depth:
        raise ParseError(f"The JSON nests deeper than {max_depth} levels.")
    if oversized:
        _reject_oversized_ints(value)
    return value


def _reject_oversized_ints(value: Any) -> None:
    """Raise ``INVALID_STEP_VALUE`` at the first ``OversizedInt`` of a decoded body: O(size
    of the body), its path built only once found."""
    stack: list[tuple[Any, Any]] = [(value, None)]
    while stack:
        current, node = stack.pop()
        if isinstance(current, OversizedInt):
            segments: list[Any] = []
            while node is not None:
                segments.append(node[0])
                node = node[1]
            path: StorePath = tuple(reversed(segments))
            raise WorkflowValueError(
                "INVALID_STEP_VALUE",
                "",
                f"The body is not a durable value at {format_path(path)}: "
                f"integers have at most {MAX_INT_DIGITS} digits",
                path=path,
            )
        if isinstance(current, dict):
            stack.extend((child, (key, node)) for key, child in reversed(current.items()))
        elif isinstance(current, list):
            stack.extend((child, (i, node)) for i, child in reversed(list(enumerate(current))))


def read_limited(stream: IO[bytes] | None) -> bytes:
    """Read the body, raising ``RequestTooLarge`` past ``API_MAX_BODY_BYTES``."""
    if stream is None:
        return b""
    limit = yieldstar_settings.API_MAX_BODY_BYTES
    raw = stream.read(limit + 1)
    if len(raw) > limit:
        raise RequestTooLarge(f"The request body is larger than {limit} bytes.")
    return raw


class SafeJSONParser(BaseParser):
    """``application/json``, bounded in size and depth."""

    media_type = "application/json"

    def parse(
        self,
        stream: IO[Any] | None,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        return loads_json(
            read_limited(stream),
            max_depth=yieldstar_settings.MAX_DEPTH + PATCH_DEPTH_SLACK,
            max_values=yieldstar_settings.MAX_STATE_NODES + BODY_NODE_SLACK,
        )


class MergePatchParser(SafeJSONParser):
    """``application/merge-patch+json`` (RFC 7396)."""

    media_type = MERGE_PATCH


class JsonPatchParser(SafeJSONParser):
    """``application/json-patch+json`` (RFC 6902)."""

    media_type = JSON_PATCH


__all__ = [
    "BODY_NODE_SLACK",
    "JSON_PATCH",
    "MERGE_PATCH",
    "JsonPatchParser",
    "MergePatchParser",
    "SafeJSONParser",
    "loads_json",
    "read_limited",
]
