"""``define_store`` as the project exports it: a store name taken elsewhere is a Django
misconfiguration (``ImproperlyConfigured``), and a DRF serializer class or a callable
raising Django's ``ValidationError`` is a schema (``schema_adapters``, registered on import)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from . import schema_adapters  # noqa: F401  (registers the Django schema kinds)
from .core import definition as core_definition
from .core.definition import PermissionHook, StoreDefinition
from .core.errors import DuplicateStoreError as CoreDuplicateStoreError


class DuplicateStoreError(CoreDuplicateStoreError, ImproperlyConfigured):
    """A store name defined in two places. Both the core's ``DuplicateStoreError`` and
    Django's ``ImproperlyConfigured``."""


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

    ``initial(id)`` is the state of a missing store. ``permission(request, action,
    store_id)`` narrows API and admin access to this definition's stores. ``release(draft,
    value)``, an updater, hands back a value claimed by a leased ``step.take(...,
    lease=seconds)`` when it is released or its lease expires. A value whose lease expired
    on its ``max_deliveries``-th leased take goes to ``dead_letter(draft, value)`` (an
    updater) instead of ``release``; ``requeue(draft, value)`` (an updater) takes a
    dead-lettered value back into the queue, for the admin's "requeue". ``retention`` (a
    ``timedelta``): ``yieldstar_prune`` deletes the stores of this definition untouched for
    that long that have no waiter and no held lease. Registering the same name
    again from the same place (a module re-import) replaces the definition; from another
    place it raises ``DuplicateStoreError``, an ``ImproperlyConfigured``.
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
    try:
        return core_definition.register_definition(definition, core_definition.caller_origin())
    except CoreDuplicateStoreError as exc:
        raise DuplicateStoreError(str(exc)) from None


__all__ = ["DuplicateStoreError", "define_store"]
