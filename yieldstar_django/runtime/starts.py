"""Creating an execution and requesting its first run.

Below both the registry and ``executions``: ``Workflow.start`` and ``start_workflow`` each
resolve the workflow first, then create its execution here by name.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import IntegrityError, transaction

from ..conf import yieldstar_settings
from ..core.durable import encode_durable
from ..core.keys import check_text
from ..models.runtime import Execution
from . import timers
from .outcomes import durable_limits

__all__ = ["create_execution"]


def create_execution(
    workflow_id: str, args: tuple[Any, ...], kwargs: dict[str, Any], execution_id: str | None
) -> tuple[str, bool]:
    """Create an execution of the registered workflow ``workflow_id``; return its id and
    whether this call created it (see ``executions.start_execution``)."""
    input_json = encode_durable(
        {"args": list(args), "kwargs": kwargs},
        limits=durable_limits(),
        label=f'The arguments of workflow "{workflow_id}"',
    )
    if execution_id is not None:
        if not isinstance(execution_id, str) or not execution_id or len(execution_id) > 255:
            raise ValueError("execution_id must be a non-empty str of at most 255 characters")
        check_text("execution id", execution_id)  # NUL, lone surrogates: ValueError
    new_id = execution_id or str(uuid.uuid4())
    alias = yieldstar_settings.DATABASE_ALIAS
    with transaction.atomic(using=alias):
        if execution_id is None:
            Execution.objects.create(id=new_id, workflow_id=workflow_id, input_json=input_json)
        else:
            try:
                with transaction.atomic(using=alias):
                    Execution.objects.create(
                        id=new_id, workflow_id=workflow_id, input_json=input_json
                    )
            except IntegrityError:
                existing = (
                    Execution.objects.filter(pk=new_id)
                    .values_list("workflow_id", flat=True)
                    .first()
                )
                if existing is None:
                    raise
                if existing != workflow_id:
                    raise ValueError(
                        f"execution {new_id!r} already exists for workflow {existing!r}, "
                        f"not {workflow_id!r}"
                    ) from None
                return new_id, False
        timers.request_run(new_id, workflow_id, reason="start")
    return new_id, True
