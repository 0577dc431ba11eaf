"""Who may do what through the API.

A store read needs ``yieldstar.view_storeinstance``, a store write
``yieldstar.change_storeinstance``; a definition's ``permission(request, action, store_id)``
hook can then narrow either (``action`` is ``"view"`` or ``"change"``, ``store_id`` is
``None`` for the definition as a whole). Executions need ``add_execution`` to start,
``view_execution`` to read and ``change_execution`` to cancel. Anonymous requests are
always refused, whatever the project's default permission classes.
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from ..core.definition import StoreDefinition

APP_LABEL = "yieldstar"
STORE_MODEL = "storeinstance"
EXECUTION_MODEL = "execution"


def store_permission(action: str) -> str:
    """``"yieldstar.<action>_storeinstance"``."""
    return f"{APP_LABEL}.{action}_{STORE_MODEL}"


def execution_permission(action: str) -> str:
    """``"yieldstar.<action>_execution"``."""
    return f"{APP_LABEL}.{action}_{EXECUTION_MODEL}"


def store_action(request: Request) -> str:
    """``"view"`` for a safe method, else ``"change"``."""
    return "view" if request.method in SAFE_METHODS else "change"


def _authenticated(request: Request) -> bool:
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_authenticated)


class StorePermission(BasePermission):
    """Authenticated, with the model permission for the method's action."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if not _authenticated(request):
            return False
        return bool(request.user.has_perm(store_permission(store_action(request))))


class ExecutionPermission(BasePermission):
    """Authenticated, with the permission the view names in ``execution_action``."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if not _authenticated(request):
            return False
        action = view.execution_action(request)
        return bool(request.user.has_perm(execution_permission(action)))


class SchemaPermission(BasePermission):
    """Authenticated, with at least one permission of the ``yieldstar`` app."""

    def has_permission(self, request: Request, view: Any) -> bool:
        return _authenticated(request) and bool(request.user.has_module_perms(APP_LABEL))


def hook_allows(
    request: Request, definition: StoreDefinition, action: str, store_id: str | None
) -> bool:
    """Whether the definition's permission hook (if any) allows ``action``."""
    hook = definition.permission
    return hook is None or bool(hook(request, action, store_id))


def check_hook(
    request: Request, definition: StoreDefinition, action: str, store_id: str | None
) -> None:
    """Raise ``PermissionDenied`` unless the definition's hook allows ``action``."""
    if not hook_allows(request, definition, action, store_id):
        raise PermissionDenied(
            f"You may not {action} {'this store' if store_id is not None else 'these stores'}."
        )


__all__ = [
    "ExecutionPermission",
    "SchemaPermission",
    "StorePermission",
    "check_hook",
    "execution_permission",
    "hook_allows",
    "store_action",
    "store_permission",
]
