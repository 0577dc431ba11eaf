"""Queues: flow control over starts (``define_queue``; see docs/concepts/queues.md).

A queue bounds its executions started and not finished (``concurrency``), those of one
key (``per_key``) and its starts in any window of ``rate[1]`` seconds (``rate[0]``).
An execution started into a queue without a free slot is ``queued``: no run is
requested for it, and ``acquire_lease`` refuses it. It is admitted (``pending``, its
``admitted_at`` set, its first run requested) by whoever frees a slot or wakes the queue:

- its queue's row (``QueueState``) is locked by every transaction that changes what the
  queue counts (a start, an admission, a finish, a cancel, a retry), so admissions are
  serial per queue; on SQLite the ``BEGIN IMMEDIATE`` transactions are serial anyway;
- a finish, a failure or a cancel of an admitted execution frees its slot in the
  transaction that finishes it, and admits from the waiting ones in that transaction:
  exactly as many as the freed slot allows (one), highest ``priority`` first, first come
  first within a priority. Nobody else is woken;
- a start into a queue with a free slot and nobody waiting takes the slot in one
  statement (``queue_take_slot``: an upsert of the queue's row that counts the slot only
  if one is free), then creates the execution as a plain start does;
- what cannot be admitted now for a reason that passes with time (a rate window, a
  debounce window) arms a durable timer on the first waiting execution; a wake that
  reaches a ``queued`` execution runs the admission of its queue (``tick``) instead of it.

A worker killed mid-run does not free its slot: the execution is still running (its lease
expires and another worker takes it over), so its slot stays held until it finishes.

Lock order: the queue's row before the rows of the executions it admits, cancels or
finishes (a finish stamps its time under the queue's lock).
"""

from __future__ import annotations

import math
import threading
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, connections, transaction
from django.db.models import Count, Q
from django.utils import timezone

from .. import clock, wakes
from ..conf import yieldstar_settings
from ..connector.cursors import fetchone
from ..core.durable import encode_durable
from ..core.keys import check_text
from ..manual_transaction import open_manual_transaction
from ..models.runtime import TERMINAL_STATUSES, Execution, ExecutionStatus, QueueState
from ..sql import queries
from . import timers
from .errors import ExecutionConflictError
from .outcomes import durable_limits
from .registry import resolve_workflow
from .starts import bind_arguments

if TYPE_CHECKING:
    from collections.abc import Callable

    from .registry import Workflow

__all__ = [
    "Queue",
    "QueueStats",
    "define_queue",
    "enqueue",
    "get_queue",
    "queue_position",
    "queue_stats",
    "registered_queues",
    "set_paused",
]


def _alias() -> str:
    return yieldstar_settings.DATABASE_ALIAS


@dataclass(frozen=True)
class Queue:
    """A queue (``define_queue``): its name and limits. ``start`` starts into it."""

    name: str
    concurrency: int | None = None
    per_key: int | None = None
    rate: tuple[int, float] | None = None

    def start(
        self,
        workflow: Workflow[Any, Any] | Callable[..., Any] | str,
        /,
        *args: Any,
        key: str | None = None,
        priority: int = 0,
        debounce: float | None = None,
        debounce_max: float | None = None,
        dedupe: bool = False,
        execution_id: str | None = None,
        **kwargs: Any,
    ) -> str:
        """Start ``workflow(*args, **kwargs)`` through this queue; return the execution id.

        With a free slot the execution starts as ``start_workflow`` starts one (its run
        requested when the surrounding transaction commits); without one it is
        ``queued`` until a slot frees. ``key`` names what ``per_key``, ``debounce`` and
        ``dedupe`` count by; ``priority`` (an ``int``, higher first) orders the waiting.
        ``debounce=seconds`` (needs ``key``): a start of the same workflow and key while
        one is still queued by its debounce window replaces that one's arguments and moves
        its window to ``seconds`` from now, capped at ``debounce_max`` seconds after the
        first start of the burst; it returns that execution's id. ``dedupe=True`` (needs
        ``key``): a start whose key has a live (queued or running) execution in this queue
        returns that one's id and starts nothing. ``execution_id`` makes the start
        idempotent as ``start_workflow``'s does.
        """
        return enqueue(
            self,
            resolve_workflow(workflow),
            args,
            kwargs,
            key=key,
            priority=priority,
            debounce=debounce,
            debounce_max=debounce_max,
            dedupe=dedupe,
            execution_id=execution_id,
        )[0]

    def pause(self) -> bool:
        """Admit nothing more until ``resume`` (running executions go on); ``True`` if
        this call paused it."""
        return set_paused(self.name, True)

    def resume(self) -> bool:
        """Admit again (as many as the limits allow at once); ``True`` if this call
        resumed it."""
        return set_paused(self.name, False)

    def stats(self) -> QueueStats:
        """Depth, running, oldest waiting, rate use (``queue_stats``)."""
        return queue_stats(self.name)


_queues: dict[str, Queue] = {}
_registry_lock = threading.Lock()


def _positive_int(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be an int of at least 1, not {value!r}")
    return value


def _positive_seconds(name: str, value: object) -> float:
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")
    return float(value)


def define_queue(
    name: str,
    *,
    concurrency: int | None = None,
    per_key: int | None = None,
    rate: tuple[int, float] | None = None,
) -> Queue:
    """Define (and register by name) a queue; returns the ``Queue``.

    ``concurrency``: at most that many of its executions started and not finished;
    ``per_key``: at most that many of one key; ``rate=(limit, seconds)``: at most
    ``limit`` starts in any window of ``seconds``. ``None`` leaves a bound out. Define
    queues at module level in a module every worker imports (an installed app's
    ``workflows`` or ``queues`` module). A second, different definition under the same
    name raises ``ImproperlyConfigured``; the same one again (a re-import) is fine. Bad
    limits raise ``ValueError``.
    """
    check_text("queue name", name, empty=False)
    if concurrency is not None:
        _positive_int("concurrency", concurrency)
    if per_key is not None:
        _positive_int("per_key", per_key)
    if rate is not None:
        if not isinstance(rate, tuple | list) or len(rate) != 2:
            raise ValueError(f"rate must be (limit, seconds), not {rate!r}")
        rate = (
            _positive_int("rate's limit", rate[0]),
            _positive_seconds("rate's seconds", rate[1]),
        )
    queue = Queue(name, concurrency, per_key, rate)
    with _registry_lock:
        existing = _queues.get(name)
        if existing is not None and existing != queue:
            raise ImproperlyConfigured(
                f"A queue named {name!r} is already defined as {existing!r}; queue names "
                "must be unique."
            )
        _queues[name] = queue
    return queue


def get_queue(name: str) -> Queue:
    """The queue defined as ``name`` (``LookupError`` if none is)."""
    queue = _queues.get(name)
    if queue is None:
        raise LookupError(f"No queue named {name!r} is defined in this process.")
    return queue


def registered_queues() -> list[Queue]:
    """Every queue defined in this process, by name."""
    return [queue for _, queue in sorted(_queues.items())]


def unregister_queue(name: str) -> None:
    """Forget a queue definition (for tests)."""
    with _registry_lock:
        _queues.pop(name, None)


# --- starting ----------------------------------------------------------------------------


def _check_start(
    key: object,
    priority: object,
    debounce: object,
    debounce_max: object,
    dedupe: object,
    execution_id: object,
) -> None:
    if key is not None:
        check_text("queue key", key, empty=False)
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise TypeError(f"priority must be an int, not {type(priority).__name__}")
    if not -(2**31) <= priority < 2**31:
        raise ValueError(f"priority must fit in 32 bits, not {priority!r}")
    if not isinstance(dedupe, bool):
        raise TypeError(f"dedupe must be a bool, not {type(dedupe).__name__}")
    if debounce is not None:
        _positive_seconds("debounce", debounce)
    if debounce_max is not None:
        if debounce is None:
            raise ValueError("debounce_max needs debounce")
        if _positive_seconds("debounce_max", debounce_max) < float(debounce):  # type: ignore[arg-type]
            raise ValueError("debounce_max must be at least debounce")
    if (debounce is not None or dedupe) and key is None:
        raise ValueError("debounce and dedupe need a key")
    if debounce is not None and dedupe:
        raise ValueError("a start either debounces or dedupes, not both")
    if execution_id is not None:
        check_text("execution id", execution_id, empty=False)


def enqueue(
    queue: Queue,
    workflow: Workflow[Any, Any],
    args: tuple[Any, ...] | list[Any],
    kwargs: dict[str, Any],
    *,
    key: str | None = None,
    priority: int = 0,
    debounce: float | None = None,
    debounce_max: float | None = None,
    dedupe: bool = False,
    execution_id: str | None = None,
    started_by: str = "",
    parent: str = "",
    deadline: datetime | None = None,
) -> tuple[str, bool]:
    """Start ``workflow`` through ``queue``: the queue's admission as one function, for
    every start path (``Queue.start``, the HTTP API's start, a workflow's child start:
    ``parent`` and its ``deadline``). Returns the execution's id and whether this call
    created it. A start without a parent gets the workflow's ``timeout`` as its deadline,
    counted from now (queued or not), with the timer that cancels it then, as
    ``start_workflow`` gives it.

    Everything is checked before anything is written (``TypeError``, ``ValueError``,
    ``WorkflowValueError``, ``StoreKeyError``). It runs in the caller's transaction when
    there is one (in a savepoint: a failure leaves the caller's transaction usable), so
    a start path that records something else (a parent's heap row) calls it inside its
    own ``transaction.atomic`` and both commit together; the first run of an admitted
    execution is requested when that transaction commits.
    """
    bind_arguments(workflow, args, kwargs)
    _check_start(key, priority, debounce, debounce_max, dedupe, execution_id)
    input_json = encode_durable(
        {"args": list(args), "kwargs": kwargs},
        limits=durable_limits(),
        label=f'The arguments of workflow "{workflow.name}"',
    )
    alias = _alias()
    open_manual_transaction(connections[alias])
    new_id = execution_id or str(uuid.uuid4())
    own_deadline = None
    if not parent and deadline is None and workflow.timeout is not None:
        own_deadline = deadline = clock.now() + timedelta(seconds=workflow.timeout)
    fields = {
        "id": new_id,
        "workflow_id": workflow.name,
        "input_json": input_json,
        "started_by": started_by,
        "queue": queue.name,
        "queue_key": key or "",
        "priority": priority,
        "parent": parent,
        "deadline": deadline,
    }
    try:
        with transaction.atomic(using=alias):
            started, created = _enqueue(queue, fields, key, debounce, debounce_max, dedupe)
            if created and own_deadline is not None:
                timers.schedule_timer(started, workflow.name, own_deadline, reason="deadline")
            return started, created
    except IntegrityError:
        if execution_id is None:
            raise
        existing = (
            Execution.objects.filter(pk=new_id).values_list("workflow_id", "input_json").first()
        )
        if existing is None:
            raise
        if existing[0] != workflow.name:
            raise ExecutionConflictError(new_id, existing[0], "workflow") from None
        if existing[1] != input_json:
            raise ExecutionConflictError(new_id, existing[0], "arguments") from None
        return new_id, False


def _limits(queue: Queue) -> list[Any]:
    rate = queue.rate
    return [
        queue.concurrency,
        queue.per_key,
        rate[0] if rate else None,
        rate[1] if rate else None,
    ]


def _enqueue(
    queue: Queue,
    fields: dict[str, Any],
    key: str | None,
    debounce: float | None,
    debounce_max: float | None,
    dedupe: bool,
) -> tuple[str, bool]:
    connection = connections[_alias()]
    adapt = connection.ops.adapt_datetimefield_value
    if queue.per_key is None and queue.rate is None and debounce is None and not dedupe:
        # The fast path: one statement takes a free slot (nobody waiting, not paused).
        row = fetchone(
            connection,
            queries.of(connection).queue_take_slot,
            [queue.name, queue.concurrency, adapt(timezone.now())],
        )
        if row is not None:
            now = clock.now()  # read under the queue's row lock, as every admission's
            Execution.objects.create(status=ExecutionStatus.PENDING, admitted_at=now, **fields)
            timers.request_run(fields["id"], fields["workflow_id"], reason="start")
            return fields["id"], True
    state = _lock_defined(queue)
    now = clock.now()
    if dedupe:
        live = (
            Execution.objects.filter(queue=queue.name, queue_key=key)
            .exclude(status__in=TERMINAL_STATUSES)
            .order_by("created_at")
            .values_list("id", flat=True)
            .first()
        )
        if live is not None:
            return live, False
    not_before = until = None
    if debounce is not None:
        not_before = now + timedelta(seconds=debounce)
        open_one = (
            Execution.objects.filter(
                queue=queue.name,
                queue_key=key,
                workflow_id=fields["workflow_id"],
                status=ExecutionStatus.QUEUED,
                not_before__isnull=False,
            )
            .values_list("id", "debounce_until")
            .first()
        )
        if open_one is not None:
            later = not_before if open_one[1] is None else min(not_before, open_one[1])
            Execution.objects.filter(pk=open_one[0]).update(
                input_json=fields["input_json"],
                priority=fields["priority"],
                not_before=later,
                updated_at=timezone.now(),
            )
            return open_one[0], False
        if debounce_max is not None:
            until = now + timedelta(seconds=debounce_max)
    Execution.objects.create(
        status=ExecutionStatus.QUEUED,
        queue_seq=state.next_seq,
        not_before=not_before,
        debounce_until=until,
        **fields,
    )
    state.waiting += 1
    state.next_seq += 1
    if not_before is not None:
        timers.schedule_timer(fields["id"], fields["workflow_id"], not_before, reason="queue")
    _admit(state)
    return fields["id"], True


def _lock_defined(queue: Queue) -> QueueState:
    """Lock the queue's row, creating it or writing the definition's limits into it."""
    connection = connections[_alias()]
    row = fetchone(
        connection,
        queries.of(connection).queue_lock,
        [
            queue.name,
            *_limits(queue),
            connection.ops.adapt_datetimefield_value(timezone.now()),
        ],
    )
    assert row is not None
    return _state(queue.name, row)


def _state(name: str, row: Any) -> QueueState:
    paused, running, waiting, next_seq, concurrency, per_key, rate_limit, rate_seconds = row
    return QueueState(
        name=name,
        paused=bool(paused),
        running=int(running),
        waiting=int(waiting),
        next_seq=int(next_seq),
        concurrency=concurrency,
        per_key=per_key,
        rate_limit=rate_limit,
        rate_seconds=rate_seconds,
    )


def _lock(name: str) -> QueueState | None:
    """Lock an existing queue's row (``None`` if it has none)."""
    return QueueState.objects.select_for_update().filter(pk=name).first()


# --- admission ---------------------------------------------------------------------------


def _admit(state: QueueState) -> list[str]:
    """Admit what the queue's limits allow now, under its row's lock; write its counters
    back. Returns the ids admitted. Arms a timer when a rate window holds back the head.
    The time of an admission is read under the lock, so the queue's starts are recorded
    in the order they were made (a rate window counts them right)."""
    admitted: list[str] = []
    now = clock.now()
    name = state.name
    while (
        not state.paused
        and state.waiting > 0
        and (state.concurrency is None or state.running < state.concurrency)
    ):
        candidates = Execution.objects.filter(queue=name, status=ExecutionStatus.QUEUED).filter(
            Q(not_before__isnull=True) | Q(not_before__lte=now)
        )
        if state.per_key is not None:
            full = (
                Execution.objects.filter(queue=name, admitted_at__isnull=False)
                .exclude(queue_key="")
                .exclude(status__in=TERMINAL_STATUSES)
                .values("queue_key")
                .annotate(n=Count("pk"))
                .filter(n__gte=state.per_key)
                .values("queue_key")
            )
            candidates = candidates.exclude(queue_key__in=full)
        head = (
            candidates.order_by("-priority", "queue_seq").values_list("id", "workflow_id").first()
        )
        if head is None:
            break  # the not yet due (debounced) have timers of their own
        if state.rate_limit is not None and state.rate_seconds is not None:
            window = timedelta(seconds=state.rate_seconds)
            recent = list(
                Execution.objects.filter(queue=name, admitted_at__gt=now - window)
                .order_by("-admitted_at")
                .values_list("admitted_at", flat=True)[: state.rate_limit]
            )
            if len(recent) >= state.rate_limit:
                oldest = recent[state.rate_limit - 1]
                assert oldest is not None  # admitted_at__gt
                reopen = oldest + window
                timers.ensure_timer(head[0], head[1], reopen, reason="queue")
                break
        Execution.objects.filter(pk=head[0], status=ExecutionStatus.QUEUED).update(
            status=ExecutionStatus.PENDING, admitted_at=now, updated_at=timezone.now()
        )
        timers.request_run(head[0], head[1], reason="admitted")
        state.running += 1
        state.waiting -= 1
        admitted.append(head[0])
    QueueState.objects.filter(pk=name).update(
        running=state.running,
        waiting=state.waiting,
        next_seq=state.next_seq,
        updated_at=timezone.now(),
    )
    return admitted


def release_slot(name: str) -> list[str]:
    """An admitted execution of queue ``name`` finished (in the current transaction, which
    holds its row): free its slot and admit the next (one statement when nobody waits).
    Returns the ids admitted."""
    connection = connections[_alias()]
    row = fetchone(connection, queries.of(connection).queue_release_slot, [name])
    if row is None:
        return []
    state = _state(name, row)
    if state.waiting == 0 or state.paused:
        return []
    return _admit(state)


def cancelled(name: str, *, was_queued: bool) -> None:
    """An execution of queue ``name`` was cancelled in the current transaction, which
    holds the queue's row (``lock_for``): count it out, and admit the next."""
    state = _lock(name)
    if state is None:
        return
    if was_queued:
        state.waiting = max(state.waiting - 1, 0)
    else:
        state.running = max(state.running - 1, 0)
    _admit(state)


def lock_for(name: str) -> QueueState | None:
    """Lock queue ``name``'s row before the rows of its executions (a cancel, a retry)."""
    return _lock(name)


def requeue(state: QueueState, execution_id: str) -> None:
    """A failed or cancelled execution of the queue goes back to wait for a slot (a
    retry): the caller holds the queue's row (``lock_for``) and resets the execution."""
    Execution.objects.filter(pk=execution_id).update(
        status=ExecutionStatus.QUEUED,
        admitted_at=None,
        not_before=None,
        debounce_until=None,
        queue_seq=state.next_seq,
    )
    state.waiting += 1
    state.next_seq += 1
    _admit(state)


def tick(execution_id: str) -> bool:
    """A wake reached ``execution_id`` and found it ``queued``: admit what its queue
    allows now (and acknowledge the wake). ``False`` if it is not queued."""
    row = (
        Execution.objects.filter(pk=execution_id, status=ExecutionStatus.QUEUED)
        .values_list("queue", flat=True)
        .first()
    )
    if row is None:
        return False
    alias = _alias()
    with transaction.atomic(using=alias):
        state = _lock(row)
        wakes.acknowledge(execution_id, using=alias)
        if state is not None:
            _admit(state)
            now = clock.now()
            later = (
                Execution.objects.filter(
                    pk=execution_id, status=ExecutionStatus.QUEUED, not_before__gt=now
                )
                .values_list("workflow_id", "not_before")
                .first()
            )
            if later is not None and later[1] is not None:
                timers.ensure_timer(execution_id, later[0], later[1], reason="queue")
    return True


def set_paused(name: str, paused: bool) -> bool:
    """Pause or resume queue ``name`` (a resume admits at once); ``True`` if it changed.
    A queue with no start yet gets its row (paused before its first start)."""
    check_text("queue name", name, empty=False)
    alias = _alias()
    open_manual_transaction(connections[alias])
    with transaction.atomic(using=alias):
        QueueState.objects.get_or_create(pk=name)
        state = _lock(name)
        assert state is not None
        if state.paused == paused:
            return False
        state.paused = paused
        QueueState.objects.filter(pk=name).update(paused=paused, updated_at=timezone.now())
        if not paused:
            _admit(state)
    return True


# --- seeing ------------------------------------------------------------------------------


def queue_position(execution_id: str) -> int | None:
    """1 for the next ``queued`` execution its queue admits, 2 for the one after...;
    ``None`` if the execution is not ``queued``. (Per-key limits and debounce windows may
    let a later one go first.)"""
    row = (
        Execution.objects.filter(pk=execution_id, status=ExecutionStatus.QUEUED)
        .values_list("queue", "priority", "queue_seq")
        .first()
    )
    if row is None:
        return None
    name, priority, seq = row
    ahead = (
        Execution.objects.filter(queue=name, status=ExecutionStatus.QUEUED)
        .filter(Q(priority__gt=priority) | Q(priority=priority, queue_seq__lt=seq))
        .count()
    )
    return ahead + 1


@dataclass(frozen=True)
class QueueStats:
    """What a queue holds now: ``waiting`` (its depth), ``running`` (admitted and not
    finished), ``oldest_waiting`` (when the longest waiting start was made), ``rate_used``
    (starts in the current rate window, ``None`` without a rate), ``paused``."""

    name: str
    waiting: int
    running: int
    oldest_waiting: datetime | None
    rate_used: int | None
    rate_limit: int | None
    paused: bool
    concurrency: int | None


def queue_stats(name: str) -> QueueStats:
    state = QueueState.objects.filter(pk=name).first() or QueueState(name=name)
    queued = Execution.objects.filter(queue=name, status=ExecutionStatus.QUEUED)
    oldest = queued.order_by("created_at").values_list("created_at", flat=True).first()
    used = None
    if state.rate_limit is not None and state.rate_seconds is not None:
        since = clock.now() - timedelta(seconds=state.rate_seconds)
        used = Execution.objects.filter(queue=name, admitted_at__gt=since).count()
    return QueueStats(
        name=name,
        waiting=state.waiting,
        running=state.running,
        oldest_waiting=oldest,
        rate_used=used,
        rate_limit=state.rate_limit,
        paused=state.paused,
        concurrency=state.concurrency,
    )
