"""Small helpers over parsed JSON values (``dict``/``list``/scalars); no Django needed.

Functions that walk a value are iterative, so a deep value never raises ``RecursionError``.
"""

from __future__ import annotations

from typing import Any


def copy_json(value: Any) -> Any:
    """A fresh copy made of plain ``dict`` and ``list`` (subclasses are copied as plain)."""
    if not isinstance(value, (dict, list)):
        return value
    root: Any = {} if isinstance(value, dict) else []
    stack: list[tuple[Any, Any]] = [(value, root)]
    while stack:
        source, target = stack.pop()
        items = dict.items(source) if isinstance(source, dict) else enumerate(source)
        for key, child in items:
            if isinstance(child, (dict, list)):
                copied: Any = {} if isinstance(child, dict) else []
                stack.append((child, copied))
            else:
                copied = child
            if isinstance(target, dict):
                target[key] = copied
            else:
                target.append(copied)
    return root


def json_equal(left: Any, right: Any) -> bool:
    """Equality as JSON defines it: numbers compare by value (``1 == 1.0``), booleans are
    not numbers, objects compare by their members whatever their order."""
    stack: list[tuple[Any, Any]] = [(left, right)]
    while stack:
        a, b = stack.pop()
        if isinstance(a, bool) or isinstance(b, bool):
            if not (isinstance(a, bool) and isinstance(b, bool) and a == b):
                return False
        elif isinstance(a, (int, float)) or isinstance(b, (int, float)):
            if not (isinstance(a, (int, float)) and isinstance(b, (int, float)) and a == b):
                return False
        elif isinstance(a, dict) or isinstance(b, dict):
            if not (isinstance(a, dict) and isinstance(b, dict)) or a.keys() != b.keys():
                return False
            stack.extend((a[key], b[key]) for key in a)
        elif isinstance(a, list) or isinstance(b, list):
            if not (isinstance(a, list) and isinstance(b, list)) or len(a) != len(b):
                return False
            stack.extend(zip(a, b, strict=True))
        elif a != b or type(a) is not type(b):
            return False
    return True


def json_depth(value: Any, *, limit: int) -> int:
    """The nesting depth of ``value`` (a scalar is 0, ``[]`` is 1), counting stops once it
    exceeds ``limit`` (the result is then ``limit + 1``)."""
    deepest = 0
    level = [value]  # one level at a time: no tuple per node
    while True:
        containers = [item for item in level if isinstance(item, (dict, list))]
        if not containers:
            return deepest
        deepest += 1
        if deepest > limit:
            return limit + 1
        level = [
            child
            for container in containers
            for child in (container.values() if isinstance(container, dict) else container)
        ]


def json_size(value: Any, *, limit: int) -> int:
    """About the length of ``value``'s compact JSON encoding (its UTF-8 bytes, escapes
    aside: never more than the encoding's), counting stops once it exceeds ``limit`` (the
    result is then more than ``limit``): so it costs at most about ``limit`` steps."""
    size = 0
    stack: list[Any] = [value]
    while stack and size <= limit:
        current = stack.pop()
        if isinstance(current, dict):
            size += 1 + 2 * len(current)  # braces, and per member a colon and a comma
            for key, child in dict.items(current):
                size += len(key) + 2
                stack.append(child)
        elif isinstance(current, list):
            size += 1 + len(current)  # brackets and commas
            stack.extend(current)
        elif isinstance(current, str):
            size += len(current) + 2
        elif current is None or isinstance(current, bool):
            size += 5 if current is False else 4
        else:  # a number
            size += len(repr(current))
    return size


__all__ = ["copy_json", "json_depth", "json_equal", "json_size"]
