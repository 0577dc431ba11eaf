"""Starting, inspecting, cancelling and resuming executions.

``run_execution`` is what the Celery task ``yieldstar_django.resume_execution`` calls: it
takes the lease, replays the workflow (again, while wakes arrived during the run), and
records where the execution stands. It is idempotent; calling it for a finished
execution, or while another worker runs it, does no harm.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import nullcontext
from datetime import timedelta
from enum import StrEnum
from typing import Any, Final

from django.db import connections, transaction
from django.utils import timezone

from .. import clock, wakes
from ..conf import yieldstar_settings
from ..connector import get_store_client
from ..core.keys import check_text
from ..core.store import StoreClient
from ..manual_transaction import open_manual_transaction
from ..models.runtime import ChildWait, Execution, ExecutionRun, ExecutionStatus
from ..models.stores import Waiter
from ..observability import metrics, tracing
from . import children, queues, timers
from .engine import Engine, RunCutOff, RunSliceEnded
from .errors import DeadlineExceededError
from .leases import Lease, LeaseLost, acquire_lease, live, mark_wake_pending
from .outcomes import RunOutcome, encode_error
from .registry import Workflow, get_workflow, resolve_workflow
from .starts import create_execution

logger = logging.getLogger("yieldstar_django.runtime")

__all__ = [
    "ResumeResult",
    "cancel_execution",
    "cancel_tree",
    "get_execution",
    "run_execution",
    "start_workflow",
    "waited_stores",
]

#: Runs one resume makes (wakes that arrived meanwhile) before it hands over to a new task.
MAX_RUNS_PER_RESUME: Final = 25
#: Seconds before a worker that does not know an execution's workflow tries it again.
UNKNOWN_WORKFLOW_RETRY_SECONDS: Final = 30.0


class ResumeResult(StrEnum):
    """What ``run_execution`` did."""

    FINISHED = "finished"  # the execution reached a terminal status in this resume
    SUSPENDED = "suspended"  # it waits for a wake or a timer
    BUSY = "busy"  # another run holds the lease; it will run again afterwards
    GONE = "gone"  # it was already finished, or does not exist
    LOST = "lost"  # the lease was lost mid-run (expired and taken over, or cancelled)
    DEFERRED = "deferred"  # this worker cannot run it now; a timer or a new task will
    QUEUED = "queued"  # it waits for a slot of its queue; the wake ran the queue's admission


def _resolve(fn_or_name: Workflow[Any, Any] | Callable[..., Any] | str) -> Workflow[Any, Any]:
    return resolve_workflow(fn_or_name)


def start_workflow(
    fn_or_name: Workflow[Any, Any] | Callable[..., Any] | str,
    *args: Any,
    execution_id: str | None = None,
    timeout: float | None = None,
    **kwargs: Any,
) -> str:
    """Create an execution of a workflow and return its id.

    With ``timeout`` (seconds; default: the workflow's ``@workflow(..., timeout=)``) it
    gets a deadline that many seconds from now, after which it is cancelled with
    ``DeadlineExceededError`` recorded as its ``error``, its children with it.

    Before anything is stored, the arguments are bound against the workflow's signature
    (``TypeError`` naming the problem: a missing argument, one too many, an unknown
    keyword) and must be durable values (``WorkflowValueError``). Its first run is
    requested when the surrounding transaction commits (at once outside one), through a
    durable wake intent, so a crash after the commit cannot lose it; a rolled-back
    transaction creates nothing.

    With ``execution_id`` the start is idempotent: that id names one execution, ever.
    Starting it again with the same workflow and the same arguments returns the id and
    does nothing; with another workflow or other arguments it raises
    ``ExecutionConflictError`` (a ``ValueError``) and changes nothing. An id is a
    non-empty ``str`` of at most 255 characters without NUL or lone surrogates
    (``StoreKeyError`` otherwise).
    """
    return start_execution(fn_or_name, args, kwargs, execution_id=execution_id, timeout=timeout)[0]


def start_execution(
    fn_or_name: Workflow[Any, Any] | Callable[..., Any] | str,
    args: tuple[Any, ...] | list[Any],
    kwargs: dict[str, Any],
    *,
    execution_id: str | None = None,
    started_by: str = "",
    timeout: float | None = None,
) -> tuple[str, bool]:
    """``start_workflow`` with the arguments as a sequence and a dict (so no keyword of the
    workflow's can be taken for one of this function's); return the id and whether this
    call created the execution. ``started_by`` is recorded on a new execution: the HTTP
    API's principal of the user who started it (``http:<pk>``), ``""`` from Python."""
    wf = _resolve(fn_or_name)
    return create_execution(wf, args, kwargs, execution_id, started_by=started_by, timeout=timeout)


def get_execution(execution_id: str) -> Execution:
    """The execution with that id (``.status``, ``.result``, ``.error``, ``.steps``).

    Raises ``Execution.DoesNotExist`` if there is none.
    """
    if not _nameable(execution_id):
        raise Execution.DoesNotExist(f"no execution can have the id {execution_id!r}")
    return Execution.objects.get(pk=execution_id)


def cancel_execution(execution_id: str) -> bool:
    """Cancel an execution that has not finished; ``True`` if this call cancelled it.

    It stops at its next step: a run in progress records nothing more and its waiters
    are removed. Steps already recorded (store changes included) are not undone. Its
    unfinished children (``step.start``), and theirs, are cancelled in the same
    transaction; an execution waiting for one of them (``step.wait``) is woken.
    """
    if not _nameable(execution_id):
        return False
    return cancel_tree(execution_id)


def cancel_tree(execution_id: str, error_json: str = "") -> bool:
    """Cancel the execution and its unfinished descendants in one transaction, recording
    ``error_json`` as the error of each (``""``: none; a deadline's
    ``DeadlineExceededError``); wake the executions waiting for any of them. Rows are
    locked deepest level first: a child's end holds its own row, then its parent's."""
    alias = _alias()
    open_manual_transaction(connections[alias])
    with transaction.atomic(using=alias):
        if not Execution.objects.filter(live(), pk=execution_id).exists():
            return False
        levels = children.tree(execution_id)
        in_queues = _lock_queues([id for level in levels for id in level])
        cancelled: list[str] = []
        for level in reversed(levels):
            for chunk in children.chunks(level):
                ids = list(
                    Execution.objects.select_for_update(no_key=True)
                    .filter(live(), pk__in=chunk)
                    .order_by("pk")
                    .values_list("id", flat=True)
                )
                if not ids:
                    continue
                Execution.objects.filter(live(), pk__in=ids).update(
                    status=ExecutionStatus.CANCELLED,
                    error_json=error_json,
                    finished_at=timezone.now(),
                    lease_owner="",
                    lease_expires_at=None,
                    wake_pending=False,
                    wake_at=None,
                    waiting_on="",
                    awaiting=0,
                )
                cancelled.extend(ids)
        if execution_id not in cancelled:
            return False
        client = _store_client()
        for id in cancelled:
            client.remove_waiters(id)
            wakes.acknowledge(id, everything=True, using=alias)
        for chunk in children.chunks(cancelled):
            ChildWait.objects.filter(execution_id__in=chunk).delete()
        for id in cancelled:
            if id in in_queues:
                queue, was_queued = in_queues[id]
                queues.cancelled(queue, was_queued=was_queued)
        children.wake_waiters(cancelled)
    return True


def _lock_queues(ids: list[str]) -> dict[str, tuple[str, bool]]:
    """Lock the rows of the queues the live executions of ``ids`` were started into (by
    name: a queue's row before its executions' rows, ``runtime/queues.py``); of each of
    those executions, its queue and whether it still waited for a slot."""
    named: list[str] = []
    for chunk in children.chunks(ids):
        named += (
            Execution.objects.filter(live(), pk__in=chunk)
            .exclude(queue="")
            .values_list("id", flat=True)
        )
    if not named:
        return {}
    rows: list[tuple[str, str, Any]] = []
    for chunk in children.chunks(named):
        rows += Execution.objects.filter(pk__in=chunk).values_list("id", "queue", "admitted_at")
    held = {name for name in sorted({queue for _, queue, _ in rows}) if queues.lock_for(name)}
    return {id: (queue, admitted is None) for id, queue, admitted in rows if queue in held}


def _past_deadline(execution: Execution) -> bool:
    return execution.deadline is not None and clock.now() >= execution.deadline


def _cancel_if_overdue(execution_id: str) -> bool:
    """Cancel the execution (one not leased to this run: under way elsewhere, or queued)
    if it is live and its deadline passed; whether this call cancelled it."""
    overdue = Execution.objects.filter(
        live(), pk=execution_id, deadline__lte=clock.now()
    ).values_list("deadline", flat=True)
    return any([_cancel_at_deadline(execution_id, deadline) for deadline in overdue])


def _cancel_at_deadline(execution_id: str, deadline: Any) -> bool:
    """Cancel an execution whose deadline passed, with ``DeadlineExceededError``."""
    error = DeadlineExceededError(execution_id, deadline.isoformat())
    return cancel_tree(execution_id, encode_error(error))


def waited_stores(execution: Execution) -> list[dict[str, str]]:
    """The stores ``execution`` waits on, from its registered waiters (one query): ``{"store":
    name, "id": store id, "step": step key}`` each, by store name and id; ``[]`` when it
    waits on none (running, sleeping, finished). A ``take_any`` choice's waiter is named
    by the step's key (``waiting_on``)."""
    rows = (
        Waiter.objects.using(_alias())
        .filter(execution_id=execution.id)
        .values_list("store__name", "store__store_id", "step_key")
    )
    found: dict[tuple[str, str], str] = {}
    for name, store_id, key in rows:
        waiting_on = execution.waiting_on
        if waiting_on and key.startswith(f"{waiting_on}#"):
            key = waiting_on
        found.setdefault((name, store_id), key)
    return [{"store": n, "id": i, "step": k} for (n, i), k in sorted(found.items())]


def _alias() -> str:
    return yieldstar_settings.DATABASE_ALIAS


def _nameable(execution_id: object) -> bool:
    """Whether ``execution_id`` could name an execution: a str the tables can hold (no NUL,
    which PostgreSQL text cannot hold, no lone surrogate, which no database driver encodes;
    looking one up would be a database or encoding error, not a miss)."""
    try:
        check_text("execution id", execution_id)
    except (TypeError, ValueError):
        return False
    return True


def _store_client() -> StoreClient:
    return get_store_client()


def run_execution(execution_id: str) -> ResumeResult:
    """Resume an execution: the body of the ``yieldstar_django.resume_execution`` task.

    Takes the lease (or, if another run holds it, flags a pending wake for that run and
    returns ``BUSY``), replays the workflow until it finishes or suspends, runs it again
    while wakes arrived during the run, and releases the lease. Errors of the runtime
    itself (a database outage) propagate after a best-effort release; the execution then
    resumes on its next wake or at its lease timer. A run stopped by ``engine.run_deadline``
    (the testing helpers' time limit) releases the lease with a run requested at once and
    raises ``RunCutOff``. A run that used up its time slice (``RUN_SLICE_SECONDS``) before
    a step it would execute releases the lease with a run requested at once and returns
    ``DEFERRED``: the pool process goes back to the queue.
    """
    if not _nameable(execution_id):
        return ResumeResult.GONE
    open_manual_transaction(connections[_alias()])
    lease: Lease | None = None
    for _ in range(5):
        lease = acquire_lease(execution_id)
        if lease is not None:
            break
        if mark_wake_pending(execution_id):
            _cancel_if_overdue(execution_id)  # the run under way stops at its next step
            return ResumeResult.BUSY
        if _cancel_if_overdue(execution_id):  # queued past its deadline
            return ResumeResult.FINISHED
        if queues.tick(execution_id):
            return ResumeResult.QUEUED
        if not Execution.objects.filter(live(), pk=execution_id).exists():
            wakes.acknowledge(execution_id, everything=True, using=_alias())
            return ResumeResult.GONE
    if lease is None:
        return ResumeResult.BUSY
    if _past_deadline(lease.execution):
        _cancel_at_deadline(execution_id, lease.execution.deadline)
        return ResumeResult.FINISHED
    try:
        wf = get_workflow(lease.execution.workflow_id)
    except LookupError:
        logger.error(
            "execution %s: workflow %r is not registered in this process; retrying in %ss",
            execution_id,
            lease.execution.workflow_id,
            UNKNOWN_WORKFLOW_RETRY_SECONDS,
        )
        _release_later(lease, UNKNOWN_WORKFLOW_RETRY_SECONDS)
        return ResumeResult.DEFERRED
    lease.start_heartbeat()
    try:
        return _run_loop(lease, wf)
    except LeaseLost:
        _forget_waiters_if_finished(execution_id)
        return ResumeResult.LOST
    except RunCutOff:
        _release_later(lease, 0.0)  # due again at once, for whoever set the deadline
        raise
    except RunSliceEnded:
        # Give the pool process back: a new run, requested at once, queues behind the
        # wakes already waiting (a takeover goes before them all).
        _release_later(lease, 0.0)
        return ResumeResult.DEFERRED
    except BaseException:
        _abandon(lease)
        raise
    finally:
        lease.stop_heartbeat()


def _run_loop(lease: Lease, wf: Workflow[Any, Any]) -> ResumeResult:
    client = _store_client()
    slice_seconds = yieldstar_settings.RUN_SLICE_SECONDS
    slice_end = (
        None
        if slice_seconds is None or lease.in_transaction
        else time.monotonic() + float(slice_seconds)
    )
    for _ in range(MAX_RUNS_PER_RESUME):
        if _past_deadline(lease.execution):
            _cancel_at_deadline(lease.execution_id, lease.execution.deadline)
            return ResumeResult.FINISHED
        engine = Engine(wf, lease, client, slice_end=slice_end)
        with tracing.span(
            "yieldstar.run", _run_attributes(lease), links=_start_link(lease), quiet=QUIET
        ) as span:
            outcome = engine.run()
            span.set("yieldstar.run.outcome", outcome.status)
            span.set("yieldstar.run.steps_executed", engine.executed)
            if outcome.error_json and outcome.status == ExecutionStatus.FAILED:
                span.error(_RunFailed(outcome.error_json))
        if outcome.terminal:
            _finish(lease, outcome, client, waiters=bool(engine.open_takes))
            metrics.execution_finished(wf.name, outcome.status)
            return ResumeResult.FINISHED
        if _release_suspended(lease, outcome):
            return ResumeResult.SUSPENDED
        # A wake arrived during the run: clear it and run again under the same lease; the
        # run about to start satisfies the intents due now (not the lease's takeover timer).
        if not lease.run_again():
            raise LeaseLost(lease.execution_id)
    _release_later(lease, 0.0)
    return ResumeResult.DEFERRED


#: What a run's span does not record as an error: the lease lost, the run cut short.
QUIET: Final[tuple[type[BaseException], ...]] = (LeaseLost, RunCutOff, RunSliceEnded)


class _RunFailed(Exception):
    """The error a failed run's span records: the workflow's error as recorded."""


def _run_attributes(lease: Lease) -> dict[str, str | int | float | bool] | None:
    if not tracing.enabled():
        return None
    execution = lease.execution
    return {
        "yieldstar.execution.id": execution.id,
        "yieldstar.workflow": execution.workflow_id,
        "yieldstar.run": execution.runs,
    }


def _start_link(lease: Lease) -> tuple[str, ...]:
    """The execution's start, linked from each of its runs (when it was traced)."""
    start = lease.execution.trace_context
    return (start,) if start else ()


def _forget_waiters_if_finished(execution_id: str) -> None:
    """After a run lost its lease: remove the execution's waiters if it finished meanwhile
    (cancelled, say). A registration on the heap's database is fenced by the lease and
    finds none of those; on a store client elsewhere (another database, in memory) it is
    not, so a run may register one after the cancel removed those it found; every
    registration of this run is committed by now, so this or the cancel's removal sees it."""
    if not Execution.objects.filter(live(), pk=execution_id).exists():
        _store_client().remove_waiters(execution_id)


def _lock_queue_to_finish(queue: str, changes: dict[str, Any]) -> None:
    """Lock the queue's row before the finishing execution's (the order of every queue
    change, ``runtime/queues.py``), and stamp the finish under it: the queue's admissions
    and finishes are recorded in the order they were made, so a finish stamped before an
    admission committed before it."""
    queues.lock_for(queue)
    changes["finished_at"] = changes["updated_at"] = timezone.now()


def _finish(lease: Lease, outcome: RunOutcome, client: StoreClient, *, waiters: bool) -> None:
    """Record the terminal outcome, release the lease and acknowledge every wake intent of
    the execution; remove leftover waiters (of takes the workflow registered but never
    reached again) in the same transaction."""
    now = timezone.now()
    changes = {
        "status": outcome.status,
        "result_json": outcome.result_json,
        "error_json": outcome.error_json,
        "finished_at": now,
        "updated_at": now,
        "wake_pending": False,
        "waiting_on": "",
        "wake_at": None,
    }
    # An execution another one waits for (``awaited``) ends in a transaction that wakes
    # that one (``children.wake_waiters``); one that was not when its lease was taken is
    # released unless it became so meanwhile (then again, in such a transaction). One of a
    # queue frees its slot in the same transaction.
    awaited = lease.execution.awaited
    queue = lease.execution.queue
    with transaction.atomic(using=_alias()) if waiters or awaited or queue else nullcontext():
        if queue:
            _lock_queue_to_finish(queue, changes)
        # A finished execution needs no more wakes: the release acknowledges them all (one
        # delivered meanwhile finds it GONE).
        released = lease.release(changes, acknowledge_all=True, unless_awaited=not awaited)
        if released and waiters:
            client.remove_waiters(lease.execution_id)
        if released and queue:
            # Its slot frees with its finish, and the next waiting one is admitted.
            queues.release_slot(queue)
        if released and awaited:
            children.wake_waiters([lease.execution_id])
    if not released:
        if awaited or not Execution.objects.filter(lease.owned(), awaited=True).exists():
            raise LeaseLost(lease.execution_id)
        with transaction.atomic(using=_alias()):
            if queue:
                _lock_queue_to_finish(queue, changes)
            if not lease.release(changes, acknowledge_all=True):
                raise LeaseLost(lease.execution_id)
            if waiters:
                client.remove_waiters(lease.execution_id)
            if queue:
                queues.release_slot(queue)
            children.wake_waiters([lease.execution_id])
    if outcome.status == ExecutionStatus.FAILED:
        logger.info("execution %s failed: %s", lease.execution_id, outcome.error_json)


def _release_suspended(lease: Lease, outcome: RunOutcome) -> bool:
    """Release the lease as ``outcome.status`` unless a wake arrived during the run."""
    changes = {
        "status": outcome.status,
        "waiting_on": outcome.waiting_on,
        "wake_at": outcome.wake_at,
        "updated_at": timezone.now(),
    }
    return lease.release(changes, unless_wake_pending=True)


def _release_later(lease: Lease, seconds: float) -> None:
    """Release the lease with a durable timer that runs the execution again."""
    at = clock.now() + timedelta(seconds=seconds)
    with transaction.atomic(using=_alias()):
        if lease.release({"wake_pending": False}):
            if seconds > 0:
                timers.schedule_timer(
                    lease.execution_id, lease.execution.workflow_id, at, reason="deferred"
                )
            else:
                timers.request_run(
                    lease.execution_id, lease.execution.workflow_id, reason="deferred"
                )


def _abandon(lease: Lease) -> None:
    """After an unexpected error: let the lease go now, so any wake may take over.

    The owner is cleared too, so a renewal of the lease keeper that lands after this (its
    round under way) cannot take the lease back. On a connection the error left broken (cut
    during the run), it is done on a new one, so the resume that retries at once finds the
    lease free. The lease timer scheduled at acquisition stays, so the execution is resumed
    even if nothing else wakes it. Best effort: the database may be what failed.
    """
    connection = connections[_alias()]
    for attempt in range(2):
        try:
            if Execution.objects.filter(lease.owned()).update(
                lease_owner="", lease_expires_at=None
            ):
                ExecutionRun.objects.filter(
                    execution_id=lease.execution_id, lease_owner=lease.token, ended_at=None
                ).update(ended_at=clock.now(), outcome="abandoned")
            return
        except Exception:
            if attempt == 0 and not connection.in_atomic_block:
                connection.close_if_unusable_or_obsolete()
                if connection.connection is None:
                    continue  # it was broken: once more, on a new connection
            logger.warning("could not release the lease of %s", lease.execution_id, exc_info=True)
            return
