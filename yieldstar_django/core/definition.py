"""Store definitions and the registry that names them."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from .errors import DuplicateStoreError, StoreKeyError, StoreKeyTypeError
from .schema import Validator, compile_schema

#: ``permission(request, action, store_id) -> bool``: narrows API and admin access for one
#: definition. ``action`` is ``"view"`` or ``"change"``. It can only narrow: the model
#: permission is checked first. Asked about the definition as a whole (``store_id`` is
#: ``None``) it may answer a Django ``Q`` over ``id`` instead of ``True``: the ids it may
#: allow, which lists and counts then filter in the database (see
#: ``docs/howto/http-api.md#who-may-call-it``).
PermissionHook = Callable[[Any, str, str | None], Any]

#: The largest ``max_deliveries`` (the delivery counts are 32-bit integer columns).
MAX_DELIVERIES = 2**31 - 1
#: The longest ``retention`` (100 years, the longest duration a setting takes).
MAX_RETENTION = timedelta(days=100 * 365)


@dataclass(frozen=True)
class StoreDefinition:
    """A named kind of store: its schema and the state a new store starts with.

    ``initial(id)`` is evaluated only when the store with that id is missing.
    """

    name: str
    schema: Any
    initial: Callable[[str], Any]
    permission: PermissionHook | None = field(default=None, compare=False, repr=False)
    #: ``release(draft, value)`` hands a leased claim's value back (see ``step.take``).
    release: Callable[[Any, Any], Any] | None = field(default=None, compare=False, repr=False)
    #: A value whose lease expired on its ``max_deliveries``-th leased take goes to
    #: ``dead_letter(draft, value)`` instead of ``release``.
    max_deliveries: int | None = field(default=None, compare=False)
    dead_letter: Callable[[Any, Any], Any] | None = field(default=None, compare=False, repr=False)
    #: ``requeue(draft, value)`` takes a dead-lettered value back out of where
    #: ``dead_letter`` put it and into the queue (the admin's "requeue").
    requeue: Callable[[Any, Any], Any] | None = field(default=None, compare=False, repr=False)
    #: Stores of the definition untouched for this long, with no waiter and no held
    #: lease, are deleted by ``yieldstar_prune``.
    retention: timedelta | None = field(default=None, compare=False)
    validator: Validator = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        # Only the type and emptiness here: what the tables cannot hold (too long, NUL, a
        # lone surrogate) every client refuses at each call (``core.keys``).
        if not isinstance(self.name, str):
            kind = type(self.name).__name__
            raise StoreKeyTypeError("store name", "type", f"must be a str, not {kind}")
        if not self.name:
            raise StoreKeyError("store name", "empty", "must not be empty")
        if not callable(self.initial):
            raise TypeError(f"initial of store {self.name!r} must be a callable initial(id)")
        for what in ("release", "dead_letter", "requeue"):
            if getattr(self, what) is not None and not callable(getattr(self, what)):
                raise TypeError(
                    f"{what} of store {self.name!r} must be a callable {what}(draft, value)"
                )
        self._check_dead_letters()
        if self.retention is not None and not isinstance(self.retention, timedelta):
            raise TypeError(
                f"retention of store {self.name!r} must be a timedelta, not {self.retention!r}"
            )
        if self.retention is not None and not timedelta(0) < self.retention <= MAX_RETENTION:
            raise ValueError(
                f"retention of store {self.name!r} must be positive and at most 100 years: "
                f"{self.retention}"
            )
        object.__setattr__(self, "validator", compile_schema(self.name, self.schema))

    def _check_dead_letters(self) -> None:
        """``max_deliveries`` and ``dead_letter`` come together, with a ``release``;
        ``requeue`` only with them."""
        n = self.max_deliveries
        if n is not None and (isinstance(n, bool) or not isinstance(n, int)):
            raise TypeError(f"max_deliveries of store {self.name!r} must be an int, not {n!r}")
        if n is not None and not 1 <= n <= MAX_DELIVERIES:
            raise ValueError(
                f"max_deliveries of store {self.name!r} must be from 1 to {MAX_DELIVERIES}: {n}"
            )
        if (n is None) != (self.dead_letter is None):
            raise TypeError(
                f"store {self.name!r}: max_deliveries and dead_letter(draft, value) go "
                "together (how many leased takes a value gets, and where it goes after them)"
            )
        if n is not None and self.release is None:
            raise TypeError(
                f"store {self.name!r}: max_deliveries counts leased takes, which need "
                "release(draft, value)"
            )
        if self.requeue is not None and n is None:
            raise TypeError(
                f"store {self.name!r}: requeue(draft, value) needs max_deliveries and "
                "dead_letter (it takes a dead-lettered value back)"
            )


_registry: dict[str, tuple[StoreDefinition, tuple[str, int]]] = {}
_registry_lock = threading.Lock()


def define_store(
    name: str,
    schema: Any,
    *,
    initial: Callable[[str], Any],
    permission: PermissionHook | None = None,
    release: Callable[[Any, Any], Any] | None = None,
    max_deliveries: int | None = None,
    dead_letter: Callable[[Any, Any], Any] | None = None,
    requeue: Callable[[Any, Any], Any] | None = None,
    retention: timedelta | None = None,
) -> StoreDefinition:
    """Create a ``StoreDefinition`` and register it under ``name``.

    ``release(draft, value)``, an updater, hands back a value claimed by a leased
    ``step.take(..., lease=seconds)`` when it is released or its lease expires. A value
    whose lease expired on its ``max_deliveries``-th leased take goes to
    ``dead_letter(draft, value)`` instead; ``requeue(draft, value)`` takes it back.
    ``retention``: how long a store may stay untouched before ``yieldstar_prune`` deletes
    it. Registering the same name again from the same place (a module re-import) replaces
    the definition; from another place it raises ``DuplicateStoreError``.
    """
    definition = StoreDefinition(
        name,
        schema,
        initial,
        permission,
        release,
        max_deliveries=max_deliveries,
        dead_letter=dead_letter,
        requeue=requeue,
        retention=retention,
    )
    return register_definition(definition, caller_origin())


def caller_origin(depth: int = 2) -> tuple[str, int]:
    """The file and line ``depth`` frames above this call (2: the caller's caller)."""
    frame = sys._getframe(depth)
    return (frame.f_code.co_filename, frame.f_lineno)


def register_definition(definition: StoreDefinition, origin: tuple[str, int]) -> StoreDefinition:
    """Register ``definition`` under its name, defined at ``origin`` (file, line).

    The same origin again replaces it (a module re-import); another origin raises
    ``DuplicateStoreError``.
    """
    name = definition.name
    with _registry_lock:
        existing = _registry.get(name)
        if existing is not None and existing[1] != origin:
            where = f"{existing[1][0]}:{existing[1][1]}"
            raise DuplicateStoreError(
                f"A store named {name!r} is already defined at {where}; store names must be "
                "unique across the project."
            )
        _registry[name] = (definition, origin)
    return definition


def get_definition(name: str) -> StoreDefinition | None:
    """The registered definition named ``name``, if any."""
    entry = _registry.get(name)
    return entry[0] if entry else None


def registered_definitions() -> list[StoreDefinition]:
    """Every registered definition, ordered by name."""
    return [entry[0] for _, entry in sorted(_registry.items())]


def unregister_store(name: str) -> None:
    """Forget a definition (for tests that define throwaway stores)."""
    with _registry_lock:
        _registry.pop(name, None)


__all__ = [
    "MAX_DELIVERIES",
    "MAX_RETENTION",
    "PermissionHook",
    "StoreDefinition",
    "caller_origin",
    "define_store",
    "get_definition",
    "register_definition",
    "registered_definitions",
    "unregister_store",
]
