"""JSON Merge Patch (RFC 7396). Pure Python, no Django.

``apply_merge_patch(target, patch)`` returns the merged value: a patch that is not an
object replaces the target; an object patch sets each member, removing those whose value
is ``null`` and merging nested objects. With ``in_place=True`` a ``dict`` target is
modified in place (only the members the patch names are written, so a change-tracking
draft records precise paths) and returned. Values taken from the patch are copied, so one
patch can be applied again.
"""

from __future__ import annotations

from typing import Any

from .jsonvalue import copy_json


def apply_merge_patch(target: Any, patch: Any, *, in_place: bool = False) -> Any:
    """Merge ``patch`` into ``target`` as RFC 7396 defines it and return the result."""
    if not isinstance(patch, dict):
        return copy_json(patch)
    if not isinstance(target, dict):
        target = {}
    elif not in_place:
        target = copy_json(target)
    # Iterative over nested object patches: (target dict, patch dict) pairs to merge.
    stack: list[tuple[dict[str, Any], dict[str, Any]]] = [(target, patch)]
    while stack:
        into, changes = stack.pop()
        for key, value in changes.items():
            if value is None:
                if key in into:
                    del into[key]
            elif isinstance(value, dict):
                existing = into.get(key)
                if not isinstance(existing, dict):
                    existing = {}
                    into[key] = existing
                stack.append((existing, value))
            else:
                into[key] = copy_json(value)
    return target


__all__ = ["apply_merge_patch"]
