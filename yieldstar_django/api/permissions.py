"""Who may do what through the API.

A store read needs ``yieldstar.view_storeinstance``, a store write
``yieldstar.change_storeinstance``; a definition's ``permission(request, action, store_id)``
hook can then narrow either (``action`` is ``"view"`` or ``"change"``, ``store_id`` is
``None`` for the definition as a whole, when it may answer a ``Q`` over ``id``: the ids
lists filter on). Executions need ``add_execution`` to start, ``view_execution`` to list
and read, ``change_execution`` to cancel, ``retry_execution`` to retry and
``fork_execution`` to fork; a workflow's
``permission(request, action, execution_or_arguments)`` hook can then narrow each. The
admin applies the same hooks (``admin/base.py``). Anonymous requests are always refused,
whatever the project's default permission classes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db.models import Q
from django.http import HttpRequest
from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from ..core.definition import StoreDefinition
from ..runtime.registry import (
    EXECUTION_ACTIONS,
    ExecutionPermissionHook,
    Workflow,
    get_workflow,
    registered_workflows,
)

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


def _visible(answer: Any) -> bool:
    """A hook's answer as a yes or no: a ``Q`` (even an empty one) is a yes."""
    return isinstance(answer, Q) or bool(answer)


def hook_allows(
    request: Request | HttpRequest,
    definition: StoreDefinition,
    action: str,
    store_id: str | None,
) -> bool:
    """Whether the definition's permission hook (if any) allows ``action`` (a ``Q``
    answered for the definition as a whole is a yes)."""
    hook = definition.permission
    return hook is None or _visible(hook(request, action, store_id))


def check_hook(
    request: Request, definition: StoreDefinition, action: str, store_id: str | None
) -> None:
    """Raise ``PermissionDenied`` unless the definition's hook allows ``action``."""
    if not hook_allows(request, definition, action, store_id):
        raise PermissionDenied(
            f"You may not {action} {'this store' if store_id is not None else 'these stores'}."
        )


def id_lookups(q: Q, column: str) -> Q:
    """``q``, whose lookups name the store id ``id`` (``id``, ``id__startswith``, ...), as
    lookups on the model field ``column``. Any other field is ``ImproperlyConfigured``:
    a hook's ``Q`` speaks of store ids only."""
    renamed = Q()
    renamed.connector, renamed.negated = q.connector, q.negated
    for child in q.children:
        if isinstance(child, Q):
            renamed.children.append(id_lookups(child, column))
            continue
        lookup, value = child  # type: ignore[misc]  # a leaf: (lookup, value)
        if lookup != "id" and not lookup.startswith("id__"):
            raise ImproperlyConfigured(
                f"A store permission hook's Q may only filter on `id`, not {lookup!r}."
            )
        renamed.children.append((column + lookup[2:], value))
    return renamed


@dataclass(frozen=True)
class StoreScope:
    """Which stores of one definition a user may ``action``, as a list needs to know it.

    ``visible``: the hook (if any) allows the definition as a whole. ``ids``: the ``Q``
    (over ``id``) it answered for the definition, if it did. ``hooked``: there is a hook,
    so every id shown is asked about (``allows``), even within ``ids``.
    """

    definition: StoreDefinition
    action: str
    visible: bool
    ids: Q | None
    hooked: bool

    def filter(self, column: str = "store_id") -> Q | None:
        """The database filter of the ids the hook may allow, on ``column``; ``None``
        when it answered no ``Q``."""
        return None if self.ids is None else id_lookups(self.ids, column)

    @property
    def countable(self) -> bool:
        """Whether a count of the database rows counts what the user may see: no hook,
        or a hook that answered a ``Q`` (which must select exactly the ids it allows)."""
        return not self.hooked or self.ids is not None

    def allows(self, request: Request | HttpRequest, store_id: str) -> bool:
        """Whether the user may ``action`` the store ``store_id``."""
        hook = self.definition.permission
        return hook is None or bool(hook(request, self.action, store_id))


def store_scope(
    request: Request | HttpRequest, definition: StoreDefinition, action: str = "view"
) -> StoreScope:
    """The definition's hook asked about the definition as a whole (once)."""
    hook = definition.permission
    if hook is None:
        return StoreScope(definition, action, True, None, False)
    answer = hook(request, action, None)
    ids = answer if isinstance(answer, Q) else None
    return StoreScope(definition, action, _visible(answer), ids, True)


# --- executions -----------------------------------------------------------------------------

#: The model permission each execution action needs first.
EXECUTION_MODEL_ACTIONS: dict[str, str] = {
    "start": "add",
    "list": "view",
    "view": "view",
    "cancel": "change",
    "retry": "retry",
    "fork": "fork",
}


def execution_hook(workflow_id: str) -> ExecutionPermissionHook | None:
    """The permission hook of the workflow named ``workflow_id`` (``None``: no hook, or
    no such workflow registered)."""
    try:
        return get_workflow(workflow_id).permission
    except LookupError:
        return None


def execution_hook_allows(request: Request | HttpRequest, action: str, target: Any) -> bool:
    """Whether the hook of the execution ``target``'s workflow allows ``action`` on it
    (no hook: allowed). The model permissions are the caller's to check."""
    assert action in EXECUTION_ACTIONS and action != "start", action
    hook = execution_hook(target.workflow_id)
    return hook is None or bool(hook(request, action, target))


def start_hook_allows(
    request: Request | HttpRequest, workflow: Workflow[Any, Any], arguments: dict[str, Any]
) -> bool:
    """Whether ``workflow``'s hook allows starting it with ``arguments``
    (``{"args": [...], "kwargs": {...}}``)."""
    hook = workflow.permission
    return hook is None or bool(hook(request, "start", arguments))


def may_execution(request: Request, action: str, execution: Any) -> bool:
    """The model permission of ``action`` and the workflow's hook, for the API."""
    model_action = EXECUTION_MODEL_ACTIONS[action]
    if not request.user.has_perm(execution_permission(model_action)):
        return False
    return execution_hook_allows(request, action, execution)


def any_execution_hook() -> bool:
    """Whether a registered workflow has a permission hook (lists must then ask it)."""
    return any(w.permission is not None for w in registered_workflows())


__all__ = [
    "EXECUTION_MODEL_ACTIONS",
    "ExecutionPermission",
    "SchemaPermission",
    "StorePermission",
    "StoreScope",
    "any_execution_hook",
    "check_hook",
    "execution_hook",
    "execution_hook_allows",
    "execution_permission",
    "hook_allows",
    "id_lookups",
    "may_execution",
    "start_hook_allows",
    "store_action",
    "store_permission",
    "store_scope",
]
