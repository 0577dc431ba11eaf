"""The durable workflow runtime (``docs/internals/architecture.md#runtime``).

Everything here imports without the app registry, so a ``workflows`` (or ``models``) module
may import it at any time: the names that need the models (``start_workflow``,
``get_execution``, ``cancel_execution``, ``run_execution``, ``retry_execution``,
``fork_execution``, ``define_queue``, ``Execution``, ``ResumeResult``)
are imported on first access (PEP 562).

Layout: ``registry`` (``@workflow``), ``steps`` (the primitives), ``engine`` (replay of one
run), ``context`` (the step contract every step kind is written against), ``kinds`` (the
step kinds: ``plain_steps``, ``atomic_steps``, ``store_steps``, ``take_any``, ``claim_leases``,
``patches``, ``children``), ``leases`` (one run at a time), ``starts`` and ``executions``
(start, cancel, resume), ``repairs`` (retry, fork), ``queues`` (flow control over starts),
``timers`` (the calls into the wake outbox), ``errors``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports
from .errors import (
    ChildCancelledError,
    ChildFailedError,
    CrossDatabaseWriteError,
    DeadlineExceededError,
    ExecutionConflictError,
    NonDeterminismError,
    RetryableError,
    StepKeyError,
    WorkflowStepError,
)
from .registry import Workflow, get_workflow, registered_workflows, workflow
from .steps import ClaimLease, Step

if TYPE_CHECKING:  # pragma: no cover
    from ..models.runtime import Execution, ExecutionStatus
    from .executions import (
        ResumeResult,
        cancel_execution,
        get_execution,
        run_execution,
        start_workflow,
    )
    from .queues import Queue, define_queue
    from .repairs import ExecutionStateError, ForkPointError, fork_execution, retry_execution


#: Names that need the models, imported on first access.
_LAZY: dict[str, str] = {
    "cancel_execution": "yieldstar_django.runtime.executions",
    "get_execution": "yieldstar_django.runtime.executions",
    "run_execution": "yieldstar_django.runtime.executions",
    "start_workflow": "yieldstar_django.runtime.executions",
    "retry_execution": "yieldstar_django.runtime.repairs",
    "fork_execution": "yieldstar_django.runtime.repairs",
    "ExecutionStateError": "yieldstar_django.runtime.repairs",
    "ForkPointError": "yieldstar_django.runtime.repairs",
    "ResumeResult": "yieldstar_django.runtime.executions",
    "Queue": "yieldstar_django.runtime.queues",
    "define_queue": "yieldstar_django.runtime.queues",
    "Execution": "yieldstar_django.models.runtime",
    "ExecutionStatus": "yieldstar_django.models.runtime",
}

__all__ = [
    "ChildCancelledError",
    "ChildFailedError",
    "ClaimLease",
    "CrossDatabaseWriteError",
    "DeadlineExceededError",
    "Execution",
    "ExecutionConflictError",
    "ExecutionStateError",
    "ExecutionStatus",
    "ForkPointError",
    "NonDeterminismError",
    "Queue",
    "ResumeResult",
    "RetryableError",
    "Step",
    "StepKeyError",
    "Workflow",
    "WorkflowStepError",
    "cancel_execution",
    "define_queue",
    "fork_execution",
    "get_execution",
    "get_workflow",
    "registered_workflows",
    "retry_execution",
    "run_execution",
    "start_workflow",
    "workflow",
]


__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)
