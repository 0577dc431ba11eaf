"""JSON Patch (RFC 6902) over JSON Pointers (RFC 6901). Pure Python, no Django.

``apply_patch(document, patch)`` applies every operation in order, ``test`` included, and
returns the patched document. It is all or nothing only for the caller's copy: with
``in_place=True`` a failure may leave ``document`` half patched, so pass a copy you can
throw away (the store updater's draft is one: an exception commits nothing). Values taken
from the patch are copied before they are inserted, so one patch can be applied again.

Errors: ``InvalidPatch`` when the patch document itself is malformed (not a list, an
unknown ``op``, a missing member, a bad pointer); ``PatchConflict`` when an operation
cannot apply to this document (a missing path, an index out of range);
``PatchTestFailed`` (a ``PatchConflict``) when a ``test`` operation does not hold.

``max_copied`` bounds what the ``copy`` operations of a patch may copy in all (about the
size of the copied values' JSON): each copy of the whole document doubles it, so a short
patch could otherwise grow a document past any memory. The copy that passes it is a
``PatchConflict``; the API passes ``MAX_STATE_BYTES``, which no state can exceed anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from .jsonvalue import copy_json, json_equal, json_size

OPERATIONS: Final = ("add", "remove", "replace", "move", "copy", "test")

Pointer = tuple[str, ...]


class PatchError(ValueError):
    """A JSON Patch could not be applied; ``index`` is the failing operation, if any."""

    def __init__(self, message: str, *, index: int | None = None, path: str | None = None):
        self.index = index
        self.path = path
        where = f"operation {index}: " if index is not None else ""
        super().__init__(f"{where}{message}")


class InvalidPatch(PatchError):
    """The patch document is not a valid RFC 6902 patch."""


class PatchConflict(PatchError):
    """An operation cannot be applied to this document."""


class PatchTestFailed(PatchConflict):
    """A ``test`` operation found a different value."""


@dataclass(frozen=True)
class Operation:
    """One validated operation. ``from_`` is set for ``move``/``copy``, ``value`` for
    ``add``/``replace``/``test``."""

    op: str
    path: Pointer
    raw_path: str
    from_: Pointer | None = None
    value: Any = None


def parse_pointer(text: str) -> Pointer:
    """Split a JSON Pointer into unescaped reference tokens (``""`` is the whole document).

    Raises ``ValueError`` for a pointer that does not start with ``/`` or holds a ``~`` not
    followed by ``0`` or ``1``.
    """
    if text == "":
        return ()
    if not text.startswith("/"):
        raise ValueError(f"JSON Pointer {text!r} must be empty or start with '/'")
    tokens = []
    for token in text[1:].split("/"):
        if "~" in token and any(part[:1] not in ("0", "1") for part in token.split("~")[1:]):
            raise ValueError(f"JSON Pointer {text!r} has an invalid '~' escape")
        tokens.append(token.replace("~1", "/").replace("~0", "~"))
    return tuple(tokens)


def format_pointer(tokens: Sequence[str | int]) -> str:
    """The JSON Pointer text of ``tokens``."""
    return "".join("/" + str(t).replace("~", "~0").replace("/", "~1") for t in tokens)


def parse_patch(patch: Any) -> list[Operation]:
    """Validate a patch document and return its operations. Raises ``InvalidPatch``.

    Members an operation does not use are ignored, as the RFC asks.
    """
    if not isinstance(patch, list):
        raise InvalidPatch("a JSON Patch must be an array of operations")
    operations = []
    for index, item in enumerate(patch):
        if not isinstance(item, dict):
            raise InvalidPatch("an operation must be an object", index=index)
        op = item.get("op")
        if op not in OPERATIONS:
            raise InvalidPatch(
                f"'op' must be one of {', '.join(OPERATIONS)}, not {op!r}", index=index
            )
        path = _member_pointer(item.get("path"), "path", index)
        raw_path: str = item["path"]
        from_ = None
        if op in ("move", "copy"):
            from_ = _member_pointer(item.get("from"), "from", index)
            if op == "move" and from_ != path and path[: len(from_)] == from_:
                raise InvalidPatch(
                    "'from' must not be a proper prefix of 'path' in a move", index=index
                )
        if op in ("add", "replace", "test") and "value" not in item:
            raise InvalidPatch(f"a {op!r} operation needs a 'value'", index=index)
        operations.append(Operation(op, path, raw_path, from_, item.get("value")))
    return operations


def _member_pointer(value: Any, member: str, index: int) -> Pointer:
    if not isinstance(value, str):
        raise InvalidPatch(f"{member!r} must be a JSON Pointer string", index=index)
    try:
        return parse_pointer(value)
    except ValueError as exc:
        raise InvalidPatch(str(exc), index=index, path=value) from None


def apply_patch(
    document: Any, patch: Any, *, in_place: bool = False, max_copied: int | None = None
) -> Any:
    """Apply the RFC 6902 ``patch`` to ``document`` and return the result.

    Without ``in_place`` the document is copied first and never modified. With
    ``max_copied``, the values the ``copy`` operations copy may add up to that many
    characters of JSON (about), no more (``PatchConflict`` at the copy that passes it).
    """
    operations = patch if _is_parsed(patch) else parse_patch(patch)
    if not in_place:
        document = copy_json(document)
    budget = _CopyBudget(max_copied)
    for index, operation in enumerate(operations):
        document = _apply_one(document, operation, index, budget)
    return document


class _CopyBudget:
    """What the ``copy`` operations of one patch may still copy (``None``: no bound)."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.left = limit

    def spend(self, value: Any, index: int, operation: Operation) -> None:
        """Count the copied ``value``; ``PatchConflict`` once the copies pass the limit."""
        if self.left is None:
            return
        self.left -= json_size(value, limit=self.left)
        if self.left < 0:
            raise _conflict(
                f"the patch copies more than {self.limit} bytes of JSON in all "
                "(MAX_STATE_BYTES, which no state can exceed)",
                index,
                operation,
            )


def _is_parsed(patch: Any) -> bool:
    return isinstance(patch, list) and all(isinstance(op, Operation) for op in patch)


def _apply_one(document: Any, operation: Operation, index: int, budget: _CopyBudget) -> Any:
    op = operation.op
    if op == "add":
        return _add(document, operation.path, copy_json(operation.value), index, operation)
    if op == "remove":
        _remove(document, operation.path, index, operation)
        return document
    if op == "replace":
        if not operation.path:
            return copy_json(operation.value)
        parent, _ = _parent(document, operation.path, index, operation)
        key = _existing_key(parent, operation.path, index, operation)
        parent[key] = copy_json(operation.value)
        return document
    if op == "test":
        actual = _get(document, operation.path, index, operation)
        if not json_equal(actual, operation.value):
            raise PatchTestFailed(
                f"test failed: the value at {operation.raw_path!r} differs",
                index=index,
                path=operation.raw_path,
            )
        return document
    assert operation.from_ is not None
    if op == "copy":
        source = _get(document, operation.from_, index, operation)
        budget.spend(source, index, operation)  # before copying: the copy could be huge
        return _add(document, operation.path, copy_json(source), index, operation)
    # move
    if operation.from_ == operation.path:
        _get(document, operation.from_, index, operation)
        return document
    value = _remove(document, operation.from_, index, operation)
    return _add(document, operation.path, value, index, operation)


def _conflict(message: str, index: int, operation: Operation) -> PatchConflict:
    return PatchConflict(message, index=index, path=operation.raw_path)


def _get(document: Any, path: Pointer, index: int, operation: Operation) -> Any:
    current = document
    for depth, token in enumerate(path):
        shown = format_pointer(path[: depth + 1])
        if isinstance(current, dict):
            if token not in current:
                raise _conflict(f"{shown!r} does not exist", index, operation)
            current = current[token]
        elif isinstance(current, list):
            position = _array_index(token, len(current), index, operation)
            if position is None or position >= len(current):
                raise _conflict(f"{shown!r} does not exist", index, operation)
            current = current[position]
        else:
            raise _conflict(f"{shown!r} does not exist", index, operation)
    return current


def _parent(document: Any, path: Pointer, index: int, operation: Operation) -> tuple[Any, str]:
    parent = _get(document, path[:-1], index, operation)
    if not isinstance(parent, (dict, list)):
        shown = format_pointer(path[:-1]) or "the document"
        raise _conflict(f"{shown!r} is not an object or an array", index, operation)
    return parent, path[-1]


def _array_index(token: str, length: int, index: int, operation: Operation) -> int | None:
    """The list index of ``token``; ``None`` for ``-`` (past the end)."""
    if token == "-":
        return None
    if not token.isdigit() or not token.isascii() or (len(token) > 1 and token[0] == "0"):
        raise _conflict(f"{token!r} is not an array index", index, operation)
    return int(token) if len(token) <= 19 else length + 1


def _existing_key(parent: Any, path: Pointer, index: int, operation: Operation) -> str | int:
    token = path[-1]
    if isinstance(parent, dict):
        if token not in parent:
            raise _conflict(f"{format_pointer(path)!r} does not exist", index, operation)
        return token
    position = _array_index(token, len(parent), index, operation)
    if position is None or position >= len(parent):
        raise _conflict(f"{format_pointer(path)!r} does not exist", index, operation)
    return position


def _add(document: Any, path: Pointer, value: Any, index: int, operation: Operation) -> Any:
    if not path:
        return value
    parent, token = _parent(document, path, index, operation)
    if isinstance(parent, dict):
        parent[token] = value
        return document
    position = _array_index(token, len(parent), index, operation)
    if position is None:
        parent.append(value)
    elif position > len(parent):
        raise _conflict(f"index {token} is out of range", index, operation)
    else:
        parent.insert(position, value)
    return document


def _remove(document: Any, path: Pointer, index: int, operation: Operation) -> Any:
    if not path:
        raise _conflict("the whole document cannot be removed", index, operation)
    parent, _ = _parent(document, path, index, operation)
    key = _existing_key(parent, path, index, operation)
    value = parent[key]
    del parent[key]
    return value


__all__ = [
    "OPERATIONS",
    "InvalidPatch",
    "Operation",
    "PatchConflict",
    "PatchError",
    "PatchTestFailed",
    "apply_patch",
    "format_pointer",
    "parse_patch",
    "parse_pointer",
]
