"""Errors raised by the store protocol, and the registry that revives them by name."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

from .types import StorePath

if TYPE_CHECKING:
    from .results import StoreStepId


class StoreIssue(TypedDict):
    """One complaint of a schema: a human message and the path it refers to."""

    message: str
    path: StorePath


class YieldstarError(Exception):
    """Base class of every error this package raises on purpose.

    Errors that keep their arguments as attributes are ``@dataclass(eq=False, repr=False)``
    (identity equality and the usual repr, as for any exception), building their message
    in ``__post_init__``."""


class DuplicateStoreError(YieldstarError):
    """A store name was defined twice, in two places; store names are unique."""


class StoreValidationError(YieldstarError):
    """The store's schema rejected a state. Nothing was written.

    ``issues`` lists every complaint as ``{"message", "path"}``; ``str()`` names them all.
    """

    def __init__(self, store_name: str, issues: Sequence[StoreIssue]) -> None:
        self.store_name = store_name
        self.issues: list[StoreIssue] = [
            {"message": str(i["message"]), "path": tuple(i["path"])} for i in issues
        ]
        messages = "; ".join(_describe_issue(i) for i in self.issues) or "rejected"
        super().__init__(f'Invalid store state for "{store_name}": {messages}')


def _describe_issue(issue: StoreIssue) -> str:
    if not issue["path"]:
        return issue["message"]
    return f"{format_path(issue['path'])}: {issue['message']}"


class WorkflowValueError(YieldstarError):
    """A value is not durable, so it cannot be stored or recorded (see
    ``docs/concepts/stores.md``).

    ``code`` is machine-readable (``"INVALID_STEP_VALUE"``); ``step_key`` names the step,
    ``""`` outside a workflow; ``path`` locates the offending part of the value.
    """

    def __init__(self, code: str, step_key: str, message: str, *, path: StorePath = ()) -> None:
        self.code = code
        self.step_key = step_key
        self.path = tuple(path)
        super().__init__(message)


@dataclass(eq=False, repr=False)
class StoreKeyError(YieldstarError, ValueError):
    """A key the tables cannot hold: a store name or id, an execution id, a step key, a
    workflow name, an instance id, or a waiter's ``since_version``. Raised before any user
    code or SQL runs, by every client alike; nothing was written.

    ``label`` names the key (``"store id"``, ``"step key"``, ``"since_version"``, ...) and
    ``limit`` the rule it breaks, one of ``KEY_LIMITS``:

    - ``"type"``: not a ``str`` (for ``since_version``: not an ``int``, or a ``bool``);
      raised as :class:`StoreKeyTypeError`, which is also a ``TypeError``;
    - ``"empty"``: the empty string, where a key must name something (an execution id at
      a start, a step key, a store or workflow name);
    - ``"length"``: longer than ``max_length`` characters (255 for every key but an
      instance id, 64);
    - ``"nul"``: holds ``"\\x00"``, which PostgreSQL text cannot hold;
    - ``"surrogate"``: holds a lone surrogate, which UTF-8 cannot encode;
    - ``"ledger"``: a store step whose store name, store id, execution id and step key
      are longer together than the ledger's index holds (``max_length`` bytes of UTF-8);
    - ``"range"``: a ``since_version`` below 0 or above ``max_length``, the largest
      PostgreSQL ``bigint``.

    A subclass of ``ValueError``, so code that caught the bare ``ValueError`` of a bad key
    still does.
    """

    label: str
    limit: str
    message: str
    max_length: int | None = None

    def __post_init__(self) -> None:
        super().__init__(f"{self.label} {self.message}")


@dataclass(eq=False, repr=False)
class StoreKeyTypeError(StoreKeyError, TypeError):
    """A :class:`StoreKeyError` for a key of the wrong type (``limit == "type"``): a key
    that is not a ``str``, a ``since_version`` that is not an ``int`` (a ``bool`` is not
    one). Also a ``TypeError``, as Python raises for an argument of the wrong type, so
    ``except StoreKeyError`` catches every bad key and ``except TypeError`` the ones of
    the wrong type."""


#: The rules a key can break (``StoreKeyError.limit``).
KEY_LIMITS: frozenset[str] = frozenset(
    {"type", "empty", "length", "nul", "surrogate", "ledger", "range"}
)


@dataclass(eq=False, repr=False)
class StoreContentionError(YieldstarError):
    """A compare-and-swap loop lost the version race ``attempts`` times in a row.

    Nothing was committed by the failing call. Retry later, or raise ``CAS_MAX_ATTEMPTS``.
    """

    store_name: str
    store_id: str
    attempts: int

    def __post_init__(self) -> None:
        super().__init__(
            f'Gave up on store "{self.store_name}" id {self.store_id!r} after {self.attempts} '
            "conflicting compare-and-swap attempts"
        )


@dataclass(eq=False, repr=False)
class CorruptStateError(YieldstarError):
    """The stored state of a store does not decode as durable JSON: its row was written by
    hand or by another program (text cut short, ``NaN``, an integer past 4,300 digits,
    nesting past the recursion limit). Raised where a store operation decodes the stored
    text, never for a caller's value. Nothing was changed; the row needs repairing (or
    deleting). ``reason`` is the decoder's complaint."""

    store_name: str
    store_id: str
    reason: str

    def __post_init__(self) -> None:
        super().__init__(
            f'The stored state of store "{self.store_name}" id {self.store_id!r} does not '
            f"decode: {self.reason}"
        )


@dataclass(eq=False, repr=False)
class StoreStepMismatchError(YieldstarError):
    """A step id was replayed by an operation of another kind than the one it recorded.

    The applied-steps ledger holds the result of ``recorded`` (``"update"``, ``"take"`` or
    ``"delete"``) under ``step_id``; the call was a ``requested`` operation, whose result
    type the recorded one is not. Nothing was changed. It means two different store
    operations share a step key (a workflow changed the operation at a step without
    ``step.patched``, or two Idempotency-Keys collide).
    """

    step_id: StoreStepId
    recorded: str
    requested: str

    def __post_init__(self) -> None:
        step_id = self.step_id
        super().__init__(
            f"Step {step_id.step_key!r} of execution {step_id.execution_id!r} recorded a "
            f"{self.recorded!r} store operation and cannot be replayed as {self.requested!r}"
        )


def format_path(path: StorePath) -> str:
    """Render a path as ``$.a[0].b`` for messages."""
    out = "$"
    for segment in path:
        if isinstance(segment, int):
            out += f"[{segment}]"
        elif segment.isidentifier():
            out += f".{segment}"
        else:
            out += f"[{segment!r}]"
    return out


_ERROR_CLASSES: dict[str, type[BaseException]] = {}


def register_error_class(name: str, cls: type[BaseException]) -> type[BaseException]:
    """Register ``cls`` under ``name`` so a recorded error is re-raised as the same class."""
    existing = _ERROR_CLASSES.get(name)
    if existing is not None and existing is not cls and existing.__qualname__ != cls.__qualname__:
        raise ValueError(f"error class name {name!r} is already registered to {existing!r}")
    _ERROR_CLASSES[name] = cls
    return cls


def error_class(name: str) -> type[BaseException] | None:
    """The class registered under ``name``, if any."""
    return _ERROR_CLASSES.get(name)


def registered_error_name(cls: type[BaseException]) -> str | None:
    """The registry name of ``cls`` (exact class), if registered."""
    for name, registered in _ERROR_CLASSES.items():
        if registered is cls:
            return name
    return None


for _cls in (
    CorruptStateError,
    StoreValidationError,
    WorkflowValueError,
    StoreContentionError,
    StoreStepMismatchError,
    StoreKeyError,
    StoreKeyTypeError,
):
    register_error_class(_cls.__name__, _cls)

__all__ = [
    "KEY_LIMITS",
    "CorruptStateError",
    "DuplicateStoreError",
    "StoreContentionError",
    "StoreIssue",
    "StoreKeyError",
    "StoreKeyTypeError",
    "StoreStepMismatchError",
    "StoreValidationError",
    "WorkflowValueError",
    "YieldstarError",
    "error_class",
    "format_path",
    "register_error_class",
    "registered_error_name",
]
