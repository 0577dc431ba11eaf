"""The workflow registry: ``@workflow("name")`` and lookups by name.

Every process (web, Celery worker, relay) must know every workflow it may resume; the app
config imports the ``workflows`` module of every installed app at startup for that.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Generator
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, overload

from django.core.exceptions import ImproperlyConfigured

from ..conf import timeout_seconds
from ..core.keys import check_text

if TYPE_CHECKING:
    from .steps import Step, StepCall

__all__ = [
    "EXECUTION_ACTIONS",
    "ExecutionPermissionHook",
    "Workflow",
    "get_workflow",
    "registered_workflows",
    "unregister_workflow",
    "workflow",
]

P = ParamSpec("P")
R = TypeVar("R")

WorkflowFunction = Callable[..., Generator["StepCall", Any, Any]]


#: ``permission(request, action, target) -> bool``: narrows who may act on a workflow's
#: executions through the HTTP API and the admin (the model permissions still apply
#: first). ``action`` is one of ``EXECUTION_ACTIONS``; ``target`` is the ``Execution``, or
#: for ``"start"`` the arguments ``{"args": [...], "kwargs": {...}}`` it would be started
#: with (what its ``input`` would be). See ``docs/howto/http-api.md#who-may-call-it``.
ExecutionPermissionHook = Callable[[Any, str, Any], Any]

#: The actions an execution permission hook is asked about (``"retry"`` and ``"fork"``:
#: ``retry_execution`` and ``fork_execution`` through the API or the admin, asked with the
#: execution retried or forked from).
EXECUTION_ACTIONS: frozenset[str] = frozenset({"start", "list", "view", "cancel", "retry", "fork"})


class Workflow(Generic[P, R]):
    """A registered workflow: a generator function ``fn(step, *args, **kwargs)``.

    Calling it calls the function, so a workflow can run another inline with
    ``yield from other(step, ...)`` (its steps then belong to the caller's execution).
    ``start(*args, **kwargs)`` is ``start_workflow(self, *args, **kwargs)``.
    ``permission`` is its execution permission hook (``None``: the model permissions
    alone decide).
    """

    def __init__(
        self,
        name: str,
        fn: Callable[..., Generator[StepCall, Any, R]],
        permission: ExecutionPermissionHook | None = None,
        timeout: float | None = None,
    ) -> None:
        self.name = name
        self.fn = fn
        self.permission = permission
        #: Seconds an execution may take before it is cancelled with
        #: ``DeadlineExceededError`` (``None``: no deadline).
        self.timeout = timeout
        functools.update_wrapper(self, fn)

    def __call__(self, step: Step, *args: Any, **kwargs: Any) -> Generator[StepCall, Any, R]:
        return self.fn(step, *args, **kwargs)

    def start(self, *args: Any, execution_id: str | None = None, **kwargs: Any) -> str:
        """Start an execution of this workflow; see ``start_workflow``."""
        from .starts import create_execution  # the models: imported once the app is ready

        return create_execution(get_workflow(self.name), args, kwargs, execution_id)[0]

    def __repr__(self) -> str:
        return f"<Workflow {self.name!r}>"


_registry: dict[str, tuple[Workflow[Any, Any], tuple[str, str]]] = {}
_lock = threading.Lock()


def _register(
    name: str,
    fn: Callable[..., Any],
    permission: ExecutionPermissionHook | None = None,
    timeout: float | timedelta | None = None,
) -> Workflow[Any, Any]:
    # The name is every execution's ``workflow_id``: what the tables cannot hold is
    # refused here, not by the database at the first start.
    check_text("workflow name", name, empty=False)
    if permission is not None and not callable(permission):
        raise TypeError(f"@workflow({name!r}, permission=...) needs a callable")
    target = inspect.unwrap(fn)
    if not inspect.isgeneratorfunction(target):
        raise TypeError(
            f"@workflow({name!r}) needs a generator function (one that uses `yield from "
            f"step.X(...)`); {fn!r} is not one"
        )
    origin = (target.__module__, target.__qualname__)
    wf: Workflow[Any, Any] = Workflow(name, fn, permission, timeout_seconds(timeout, "timeout"))
    with _lock:
        existing = _registry.get(name)
        if existing is not None and existing[1] != origin:
            raise ImproperlyConfigured(
                f"A workflow named {name!r} is already registered by "
                f"{existing[1][0]}.{existing[1][1]}; workflow names must be unique."
            )
        _registry[name] = (wf, origin)
    return wf


@overload
def workflow(name: Callable[..., Generator[Any, Any, R]], /) -> Workflow[..., R]: ...


@overload
def workflow(
    name: str | None = None,
    /,
    *,
    permission: ExecutionPermissionHook | None = None,
    timeout: float | timedelta | None = None,
) -> Callable[[Callable[..., Generator[Any, Any, R]]], Workflow[..., R]]: ...


def workflow(
    name: Any = None,
    /,
    *,
    permission: ExecutionPermissionHook | None = None,
    timeout: float | timedelta | None = None,
) -> Any:
    """Register a generator function as the workflow ``name``.

    Used as ``@workflow("name")``; a bare ``@workflow`` names it ``module.qualname``. The
    function is called as ``fn(step, *args, **kwargs)`` and uses the step primitives as
    ``result = yield from step.run(...)``. Its return value is the execution's result and
    must be a durable value. Registering another function under a taken name raises
    ``ImproperlyConfigured``; re-importing the same module re-registers silently. A name
    the tables cannot hold (as every execution's ``workflow_id``: more than 255
    characters, ``"\\x00"``, a lone surrogate, not a ``str``) raises ``StoreKeyError``.
    ``permission=fn`` narrows who may start, list, read, cancel, retry and fork its
    executions through the HTTP API and the admin (see ``ExecutionPermissionHook``).
    ``timeout=seconds`` gives each execution a deadline that many seconds after its start,
    after which it is cancelled with ``DeadlineExceededError`` recorded, its children
    with it (see ``docs/concepts/child-workflows.md``).
    """
    if callable(name):
        fn = name
        return _register(f"{fn.__module__}.{fn.__qualname__}", fn)

    def decorator(fn: Callable[..., Generator[Any, Any, R]]) -> Workflow[..., R]:
        return _register(name or f"{fn.__module__}.{fn.__qualname__}", fn, permission, timeout)

    return decorator


def get_workflow(name: str) -> Workflow[Any, Any]:
    """The workflow registered as ``name``. Raises ``LookupError`` naming what is known."""
    entry = _registry.get(name)
    if entry is None:
        known = ", ".join(sorted(_registry)) or "none"
        raise LookupError(
            f"No workflow named {name!r} is registered (known: {known}). Is the module that "
            "defines it an installed app's `workflows` module, or imported by one?"
        )
    return entry[0]


def resolve_workflow(
    fn_or_name: Workflow[Any, Any] | Callable[..., Any] | str,
) -> Workflow[Any, Any]:
    """The registered workflow a start names: a ``Workflow``, its name, or its function
    (``LookupError`` if it is not registered)."""
    if isinstance(fn_or_name, Workflow):
        return get_workflow(fn_or_name.name)
    if isinstance(fn_or_name, str):
        return get_workflow(fn_or_name)
    for registered in registered_workflows():
        if registered.fn is fn_or_name:
            return registered
    raise LookupError(f"{fn_or_name!r} is not a registered workflow; decorate it with @workflow")


def registered_workflows() -> list[Workflow[Any, Any]]:
    """Every registered workflow, ordered by name."""
    return [entry[0] for _, entry in sorted(_registry.items())]


def unregister_workflow(name: str) -> None:
    """Forget a workflow (for tests that define throwaway workflows)."""
    with _lock:
        _registry.pop(name, None)
