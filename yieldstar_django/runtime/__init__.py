"""The durable workflow runtime (design §6).

Everything here imports without the app registry, so a ``workflows`` (or ``models``) module
may import it at any time: ``start_workflow``, ``get_execution``, ``cancel_execution`` and
``run_execution`` import the models when they are called, ``Execution`` and
``ResumeResult`` on first access (PEP 562).

Layout: ``registry`` (``@workflow``), ``steps`` (the primitives), ``engine`` (replay of one
run), ``leases`` (one run at a time), ``executions`` (start, cancel, resume), ``timers``
(the calls into the wake outbox), ``errors``.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .errors import NonDeterminismError, RetryableError, StepKeyError, WorkflowStepError
from .registry import Workflow, get_workflow, registered_workflows, workflow
from .steps import Step

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable

    from ..models.runtime import Execution, ExecutionStatus
    from .claim_leases import ClaimLease
    from .executions import ResumeResult


def start_workflow(
    fn_or_name: Workflow[Any, Any] | Callable[..., Any] | str,
    *args: Any,
    execution_id: str | None = None,
    **kwargs: Any,
) -> str:
    """Create an execution and request its first run on commit; return its id.

    See :func:`yieldstar_django.runtime.executions.start_workflow`.
    """
    from .executions import start_workflow as start

    return start(fn_or_name, *args, execution_id=execution_id, **kwargs)


def get_execution(execution_id: str) -> Execution:
    """The execution with that id; raises ``Execution.DoesNotExist``."""
    from .executions import get_execution as get

    return get(execution_id)


def cancel_execution(execution_id: str) -> bool:
    """Cancel an execution that has not finished; ``True`` if this call cancelled it."""
    from .executions import cancel_execution as cancel

    return cancel(execution_id)


def run_execution(execution_id: str) -> ResumeResult:
    """Resume an execution in this process (what the Celery task does)."""
    from .executions import run_execution as run

    return run(execution_id)


_LAZY: dict[str, str] = {
    "ResumeResult": "yieldstar_django.runtime.executions",
    "ClaimLease": "yieldstar_django.runtime.claim_leases",
    "Execution": "yieldstar_django.models.runtime",
    "ExecutionStatus": "yieldstar_django.models.runtime",
}

__all__ = [
    "ClaimLease",
    "Execution",
    "ExecutionStatus",
    "NonDeterminismError",
    "ResumeResult",
    "RetryableError",
    "Step",
    "StepKeyError",
    "Workflow",
    "WorkflowStepError",
    "cancel_execution",
    "get_execution",
    "get_workflow",
    "registered_workflows",
    "run_execution",
    "start_workflow",
    "workflow",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
