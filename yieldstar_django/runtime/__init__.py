"""The durable workflow runtime (design §6).

``workflow``, ``RetryableError`` and the error types import without the app registry;
``start_workflow``, ``get_execution``, ``cancel_execution`` and ``run_execution`` touch the
models and are imported on first use (PEP 562), so a ``workflows`` module may import this
package at any time.

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
    from ..models.runtime import Execution, ExecutionStatus
    from .executions import (
        ResumeResult,
        cancel_execution,
        get_execution,
        run_execution,
        start_workflow,
    )

_LAZY: dict[str, str] = {
    "start_workflow": "yieldstar_django.runtime.executions",
    "get_execution": "yieldstar_django.runtime.executions",
    "cancel_execution": "yieldstar_django.runtime.executions",
    "run_execution": "yieldstar_django.runtime.executions",
    "ResumeResult": "yieldstar_django.runtime.executions",
    "Execution": "yieldstar_django.models.runtime",
    "ExecutionStatus": "yieldstar_django.models.runtime",
}

__all__ = [
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
