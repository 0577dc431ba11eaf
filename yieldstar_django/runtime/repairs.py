"""Repairing executions: run a failed or cancelled one again, or fork one from a step.

``retry_execution`` sends a failed or cancelled execution back to run under its own id,
keeping its heap: the replay returns every recorded step as before and runs the step that
failed (a failed execution's last recorded step, when it recorded an error) or that it
was waiting on (a cancelled one's) again. ``fork_execution`` starts a new execution of the
same workflow and arguments whose heap is a copy of the first ``from_step`` recorded steps
of another. Both commit in one transaction with a wake intent that requests the run, so
the execution is resumed through the outbox and the relay like every other wake.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Final

from django.db import IntegrityError, connections, transaction
from django.db.models import F
from django.utils import timezone

from ..conf import yieldstar_settings
from ..core.errors import YieldstarError
from ..core.keys import check_text
from ..manual_transaction import open_manual_transaction
from ..models.runtime import Execution, ExecutionStatus, ExecutionStep, StepStatus
from . import queues, timers
from .errors import ExecutionConflictError

__all__ = [
    "RETRYABLE_STATUSES",
    "ExecutionStateError",
    "ForkPointError",
    "fork_execution",
    "recorded_steps",
    "retry_execution",
]

#: The statuses ``retry_execution`` takes an execution out of.
RETRYABLE_STATUSES: Final = frozenset({ExecutionStatus.FAILED, ExecutionStatus.CANCELLED})


@dataclass(eq=False, repr=False)
class ExecutionStateError(YieldstarError):
    """The execution's status does not allow the repair asked for: only a ``failed`` or
    ``cancelled`` execution can be retried. Nothing was changed."""

    execution_id: str
    status: str
    action: str = "retry"

    def __post_init__(self) -> None:
        super().__init__(
            f"Execution {self.execution_id!r} is {self.status}: only a failed or cancelled "
            f"execution can be {'retried' if self.action == 'retry' else self.action}."
        )


@dataclass(eq=False, repr=False)
class ForkPointError(YieldstarError, ValueError):
    """``from_step`` is not a number of recorded steps of the execution (from ``0`` to
    ``recorded``). Nothing was created."""

    execution_id: str
    from_step: int
    recorded: int

    def __post_init__(self) -> None:
        super().__init__(
            f"from_step={self.from_step} is out of range: execution {self.execution_id!r} "
            f"has {self.recorded} recorded step(s), so from_step must be from 0 to "
            f"{self.recorded}."
        )


def _alias() -> str:
    return yieldstar_settings.DATABASE_ALIAS


def _check_id(label: str, execution_id: object) -> str:
    """``execution_id`` as a str the tables can hold (``TypeError`` / ``ValueError``)."""
    check_text(label, execution_id)
    assert isinstance(execution_id, str)
    if not execution_id:
        raise ValueError(f"{label} must not be empty")
    return execution_id


def recorded_steps(execution_id: str) -> list[ExecutionStep]:
    """The execution's recorded steps (``completed`` or ``failed`` heap entries; a
    ``pending`` one is under way, not recorded) in replay order: the steps
    ``fork_execution``'s ``from_step`` counts."""
    return list(
        ExecutionStep.objects.filter(execution_id=execution_id)
        .exclude(status=StepStatus.PENDING)
        .order_by("position", "pk")
    )


def retry_execution(execution_id: str) -> bool:
    """Run a ``failed`` or ``cancelled`` execution again; ``True`` if this call did.

    Every recorded step is kept. Of a failed execution, the last step it reached is run
    again when it recorded an error (the step's error record is deleted); the steps
    before it replay their recorded results, so store steps are not applied twice. A
    cancelled execution goes on from the step it was waiting on. The execution becomes
    ``pending`` (its result, error and ``finished_at`` cleared, ``retries`` counted) and
    its run is requested through a wake intent when the surrounding transaction commits.

    Raises ``Execution.DoesNotExist`` if there is no such execution, and
    ``ExecutionStateError`` if it is neither failed nor cancelled (running, completed,
    ...). Of two calls racing for one execution exactly one retries it; the other
    returns ``False`` (the status changed between its look and its lock) or, when it
    looked after the first committed, raises ``ExecutionStateError``.
    """
    _check_id("execution id", execution_id)
    alias = _alias()
    seen = Execution.objects.using(alias).filter(pk=execution_id).values_list("status", "queue")
    status, queue = seen.first() or (None, "")
    if status is None:
        raise Execution.DoesNotExist(f"There is no execution {execution_id!r}.")
    if status not in RETRYABLE_STATUSES:
        raise ExecutionStateError(execution_id, status)
    open_manual_transaction(connections[alias])
    with transaction.atomic(using=alias):
        # A queue's row before its executions' rows (runtime/queues.py).
        queue_state = queues.lock_for(queue) if queue else None
        # The row lock orders this retry after any other (and after retention's delete).
        locked = (
            Execution.objects.using(alias)
            .select_for_update(no_key=True)
            .filter(pk=execution_id)
            .values_list("workflow_id", "status")
            .first()
        )
        if locked is None:
            raise Execution.DoesNotExist(f"There is no execution {execution_id!r}.")
        workflow_id, status = locked
        if status not in RETRYABLE_STATUSES:
            return False  # another retry took it meanwhile
        if status == ExecutionStatus.FAILED:
            last = (
                ExecutionStep.objects.using(alias)
                .filter(execution_id=execution_id)
                .order_by("-position", "-pk")
                .only("pk", "status")
                .first()
            )
            if last is not None and last.status == StepStatus.FAILED:
                ExecutionStep.objects.using(alias).filter(pk=last.pk).delete()
        Execution.objects.using(alias).filter(pk=execution_id).update(
            status=ExecutionStatus.PENDING,
            result_json="",
            error_json="",
            finished_at=None,
            waiting_on="",
            wake_at=None,
            wake_pending=False,
            lease_owner="",
            lease_expires_at=None,
            retries=F("retries") + 1,
            updated_at=timezone.now(),
        )
        if queue_state is not None:
            queues.requeue(queue_state, execution_id)  # it waits for a slot again
        else:
            timers.request_run(execution_id, workflow_id, reason="retry")
    return True


def fork_execution(source_id: str, /, *, from_step: int, execution_id: str | None = None) -> str:
    """Start a new execution of ``source_id``'s workflow and arguments whose heap is a
    copy of the source's first ``from_step`` recorded steps; return its id.

    ``from_step`` counts recorded steps (``completed`` or ``failed`` heap entries) in
    replay order: ``0`` starts afresh, the number of recorded steps copies them all. The
    fork replays the copied steps' recorded results (a copied store step is not applied
    again; a copied error is thrown in again) and runs every later step itself, under
    its own id, so store steps after the fork point apply once more for it. The new
    execution records where it came from (``forked_from``, ``fork_step``); its first run
    is requested when the surrounding transaction commits. The source may be in any
    status and is not changed.

    Raises ``Execution.DoesNotExist`` for no such source, ``TypeError`` for a
    ``from_step`` that is not an ``int`` (a ``bool`` is not), ``ForkPointError`` (a
    ``ValueError``) for one out of range, ``ValueError`` for an ``execution_id`` the
    tables cannot hold, and ``ExecutionConflictError`` for one that names another
    execution. With ``execution_id`` the fork is
    idempotent: a fork of the same source at the same step under that id returns it.
    """
    _check_id("execution id", source_id)
    if not isinstance(from_step, int) or isinstance(from_step, bool):
        raise TypeError(f"from_step must be an int, not {type(from_step).__name__}")
    if execution_id is not None:
        _check_id("execution_id", execution_id)
    new_id = execution_id or str(uuid.uuid4())
    alias = _alias()
    open_manual_transaction(connections[alias])
    with transaction.atomic(using=alias):
        # The source's row lock keeps retention from deleting it and a retry from
        # changing its heap while its steps are copied.
        source = (
            Execution.objects.using(alias)
            .select_for_update(no_key=True)
            .filter(pk=source_id)
            .only("id", "workflow_id", "input_json")
            .first()
        )
        if source is None:
            raise Execution.DoesNotExist(f"There is no execution {source_id!r}.")
        steps = recorded_steps(source_id)
        if not 0 <= from_step <= len(steps):
            raise ForkPointError(source_id, from_step, len(steps))
        try:
            with transaction.atomic(using=alias):
                Execution.objects.using(alias).create(
                    id=new_id,
                    workflow_id=source.workflow_id,
                    input_json=source.input_json,
                    forked_from=source_id,
                    fork_step=from_step,
                )
        except IntegrityError:
            if execution_id is None:
                raise
            _same_fork(new_id, source_id, from_step, alias)
            return new_id
        now = timezone.now()
        ExecutionStep.objects.using(alias).bulk_create(
            [
                ExecutionStep(
                    execution_id=new_id,
                    step_key=step.step_key,
                    position=step.position,
                    kind=step.kind,
                    fingerprint=step.fingerprint,
                    status=step.status,
                    value_json=step.value_json,
                    error_json=step.error_json,
                    attempts=step.attempts,
                    wake_at=step.wake_at,
                    created_at=now,
                    recorded_at=step.recorded_at,
                )
                for step in steps[:from_step]
            ]
        )
        timers.request_run(new_id, source.workflow_id, reason="fork")
    return new_id


def _same_fork(new_id: str, source_id: str, from_step: int, alias: str) -> None:
    """``ExecutionConflictError`` unless ``new_id`` is a fork of ``source_id`` at
    ``from_step``."""
    existing = (
        Execution.objects.using(alias)
        .filter(pk=new_id)
        .values_list("forked_from", "fork_step", "workflow_id")
        .first()
    )
    if existing is None:  # pragma: no cover - the row that collided was deleted since
        raise ValueError(f"execution {new_id!r} could not be created; try again")
    if existing[:2] != (source_id, from_step):
        raise ExecutionConflictError(new_id, existing[2], "fork")
