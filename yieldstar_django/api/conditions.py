"""ETags and ``If-Match`` for stores.

A store's ETag is ``"<instance_id>:<version>"`` (strong). ``If-Match`` holds ``*`` or a
list of entity tags (empty list elements ignored); weak tags never match (RFC 9110
compares strongly). ``If-None-Match`` is compared weakly, as RFC 9110 asks:
``W/"<instance_id>:<version>"`` (an ETag a compressing proxy weakened) matches too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from .exceptions import InvalidHeader

_ENTITY_TAG: Final = re.compile(r'\s*(W/)?"([\x21\x23-\x7e\x80-\xff]*)"\s*(?:,|$)')
#: Empty list elements (RFC 9110 5.6.1.2: a recipient accepts and ignores them).
_EMPTY_ELEMENTS: Final = re.compile(r"[\s,]*")


def make_etag(instance_id: str, version: int) -> str:
    """The ETag of a store at (``instance_id``, ``version``)."""
    return f'"{instance_id}:{version}"'


def parse_etag(tag: str) -> tuple[str, int] | None:
    """The (instance_id, version) an unquoted ETag names, or ``None`` for a tag that is not
    one this API gives (``make_etag`` never writes a leading zero)."""
    instance_id, sep, version = tag.rpartition(":")
    if not sep or not instance_id or not version.isdigit() or not version.isascii():
        return None
    if len(version) > 18 or str(int(version)) != version:
        return None
    return instance_id, int(version)


@dataclass(frozen=True)
class Condition:
    """A parsed ``If-Match``: ``any`` for ``*``, else the strong tags it lists (unquoted).
    ``absent``: a write's ``If-None-Match: *``, which only a missing store satisfies."""

    any: bool
    tags: tuple[str, ...]
    absent: bool = False

    def matches(self, etag: str) -> bool:
        """Whether the quoted ``etag`` satisfies the condition."""
        return self.any or etag[1:-1] in self.tags


def parse_if_match(
    header: str | None, name: str = "If-Match", *, weak: bool = False
) -> Condition | None:
    """Parse ``If-Match`` (or ``If-None-Match``, given as ``name``, which errors name);
    ``None`` when absent. Weak tags are left out unless ``weak`` (the weak comparison of
    ``If-None-Match``); empty list elements are ignored. Raises ``InvalidHeader``
    (``400``), also for a header that lists no entity tag at all."""
    if header is None:
        return None
    text = header.strip()
    if text == "*":
        return Condition(True, ())
    tags: list[str] = []
    listed = 0
    position = _skip_empty_elements(text, 0)
    while position < len(text):
        match = _ENTITY_TAG.match(text, position)
        if match is None:
            raise InvalidHeader(
                f'{name} must be "*" or a list of quoted entity tags, as the ETag header '
                "gives them."
            )
        listed += 1
        if weak or match.group(1) is None:
            tags.append(match.group(2))
        position = _skip_empty_elements(text, match.end())
    if not listed:
        raise InvalidHeader(f"{name} is empty.")
    return Condition(False, tuple(tags))


def _skip_empty_elements(text: str, position: int) -> int:
    """The position of the next list element of ``text`` at or after ``position``."""
    match = _EMPTY_ELEMENTS.match(text, position)
    return match.end() if match else position


__all__ = ["Condition", "make_etag", "parse_etag", "parse_if_match"]
