"""Starting an execution: the one contract every start keeps, in Python and over HTTP.

Below both the registry and ``executions``: ``Workflow.start``, ``start_workflow`` and the
HTTP API's start each resolve the workflow first, then start it here:

1. the arguments are bound against the workflow's signature (``bind_arguments``:
   ``TypeError`` naming the problem), then encoded as durable values
   (``WorkflowValueError``), and the id checked (``StoreKeyError``), before anything is
   stored;
2. the execution is created with its first run requested in one transaction;
3. an ``execution_id`` that names an existing execution returns that id when the
   execution has the same workflow and the same arguments, and raises
   ``ExecutionConflictError`` otherwise (nothing is started either way).
"""

from __future__ import annotations

import inspect
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, transaction

from .. import clock
from ..conf import timeout_seconds, yieldstar_settings
from ..core.durable import encode_durable
from ..core.keys import check_text
from ..models.runtime import Execution
from ..observability import metrics, tracing
from . import timers
from .errors import ExecutionConflictError
from .outcomes import durable_limits

if TYPE_CHECKING:
    from .registry import Workflow

__all__ = ["bind_arguments", "create_execution"]


def bind_arguments(workflow: Workflow[Any, Any], args: Any, kwargs: dict[str, Any]) -> None:
    """Raise ``TypeError`` naming the problem unless ``fn(step, *args, **kwargs)`` binds
    (a missing argument, one too many, an unknown keyword), as calling it would in the
    worker."""
    try:
        signature = inspect.signature(workflow.fn)
    except (TypeError, ValueError):  # pragma: no cover - a builtin cannot be a workflow
        return
    try:
        signature.bind(None, *args, **kwargs)
    except TypeError as exc:
        raise TypeError(
            f"The arguments do not match workflow {workflow.name!r}{signature}: {exc}"
        ) from None


def create_execution(
    workflow: Workflow[Any, Any],
    args: tuple[Any, ...] | list[Any],
    kwargs: dict[str, Any],
    execution_id: str | None,
    *,
    started_by: str = "",
    timeout: float | None = None,
    schedule: str = "",
) -> tuple[str, bool]:
    """Start the registered ``workflow``; return the execution's id and whether this call
    created it (see ``executions.start_execution``). ``started_by`` is recorded on a new
    execution (the HTTP API's principal of the user, ``http:<pk>``; ``""`` from Python),
    and ``schedule``, the name of the schedule whose tick started it. ``timeout``
    (seconds; ``None``: the workflow's own) sets its deadline, with a durable timer that
    cancels it then."""
    bind_arguments(workflow, args, kwargs)
    seconds = timeout_seconds(timeout, "timeout")
    if seconds is None:
        seconds = workflow.timeout
    workflow_id = workflow.name
    input_json = encode_durable(
        {"args": list(args), "kwargs": kwargs},
        limits=durable_limits(),
        label=f'The arguments of workflow "{workflow_id}"',
    )
    if execution_id is not None:
        check_text("execution id", execution_id, empty=False)
    new_id = execution_id or str(uuid.uuid4())
    with tracing.span(
        "yieldstar.start", _start_attributes(workflow_id, new_id, started_by)
    ) as span:
        created = _create(
            new_id, execution_id, workflow_id, input_json, started_by, schedule, seconds
        )
        span.set("yieldstar.created", created)
    if created:
        metrics.execution_started(workflow_id)
    return new_id, created


def _start_attributes(
    workflow_id: str, execution_id: str, started_by: str
) -> dict[str, str | int | float | bool] | None:
    if not tracing.enabled():
        return None
    return {
        "yieldstar.workflow": workflow_id,
        "yieldstar.execution.id": execution_id,
        "yieldstar.start.via": "http" if started_by else "python",
    }


def _create(
    new_id: str,
    execution_id: str | None,
    workflow_id: str,
    input_json: str,
    started_by: str,
    schedule: str,
    seconds: float | None,
) -> bool:
    """Create the execution (with the trace context of the current span; a deadline
    ``seconds`` from now, and its timer) and request its first run; whether it was
    created (``False``: it exists, with these arguments)."""
    alias = yieldstar_settings.DATABASE_ALIAS
    deadline = None if seconds is None else clock.now() + timedelta(seconds=seconds)
    fields = {
        "workflow_id": workflow_id,
        "input_json": input_json,
        "started_by": started_by,
        "deadline": deadline,
        "schedule": schedule,
        "trace_context": tracing.current_traceparent(),
    }
    with transaction.atomic(using=alias):
        if execution_id is None:
            Execution.objects.create(id=new_id, **fields)
        else:
            try:
                with transaction.atomic(using=alias):
                    Execution.objects.create(id=new_id, **fields)
            except IntegrityError:
                existing = (
                    Execution.objects.filter(pk=new_id)
                    .values_list("workflow_id", "input_json")
                    .first()
                )
                if existing is None:
                    raise
                if existing[0] != workflow_id:
                    raise ExecutionConflictError(new_id, existing[0], "workflow") from None
                # Canonical encodings: equal exactly when the values are equal as JSON,
                # with the same types.
                if existing[1] != input_json:
                    raise ExecutionConflictError(new_id, existing[0], "arguments") from None
                return False
        timers.request_run(new_id, workflow_id, reason="start")
        if deadline is not None:
            timers.schedule_timer(new_id, workflow_id, deadline, reason="deadline")
    return True
