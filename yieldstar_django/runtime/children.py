"""Child workflows: ``step.start``, ``step.start_many`` (kind ``start``), ``step.wait``,
``step.gather`` (kind ``wait``), and the wake of a waiting execution when what it waits
for ends.

A ``start`` step inserts its children's rows (``parent``: this execution; ``deadline``: at
most the parent's), requests their first runs and records its heap row in one
transaction; the row's write is fenced by the run's lease, so a run that lost its lease
(or lost the race to record the step) rolls its children back with it.

A ``wait`` step locks the rows of the executions it waits for (``FOR NO KEY UPDATE``, in
id order), which serializes it with their ends (each end updates its own row first).
Those finished are read; for the others it marks them ``awaited``, writes one
:class:`~yieldstar_django.models.ChildWait` row each and sets its own ``awaiting`` to how
many they are, then suspends. The end of an awaited execution (``wake_waiters``, in the
transaction that records the end: ``executions._finish`` and the cancel) deletes its wait
rows and counts each waiter's ``awaiting`` down; the waiter is woken (a durable wake
intent) only when that reaches zero. So a parent gathering N children is woken once, by
the last one, whatever the order they end in: the row lock on the waiter makes the
count exact, and the lock on the awaited rows makes the registration linearizable with
their ends (a child that ended first is read as finished; one that ends after sees the
wait row).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any, Final, NamedTuple, TypeVar

from django.db import connections
from django.db.models import F
from django.db.models.functions import Greatest
from django.utils import timezone

from .. import clock
from ..conf import yieldstar_settings
from ..core.constants import MAX_KEY_LENGTH
from ..core.durable import decode_durable, encode_durable
from ..core.keys import check_text
from ..core.results import Wake
from ..models.runtime import (
    TERMINAL_STATUSES,
    ChildWait,
    Execution,
    ExecutionStatus,
    StepKind,
)
from ..sql import queries
from . import timers
from .context import Kind, StepContext, recorded_value
from .errors import ChildCancelledError, ChildFailedError, ExecutionConflictError
from .outcomes import StepResult, StepValue, Suspend
from .registry import get_workflow
from .starts import bind_arguments
from .steps import ChildStarts

__all__ = [
    "START",
    "WAIT",
    "capped_deadline",
    "child_id",
    "tree",
    "wake_waiters",
]

#: Ids per statement of the lookups and updates of many executions (well under SQLite's
#: limit of bound parameters).
CHUNK: Final = 2000

T = TypeVar("T")


def chunks(items: Sequence[T], size: int = CHUNK) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def child_id(parent_id: str, step_key: str, index: int | None) -> str:
    """The id of a child a ``start`` step derives: ``"<parent>:<key>"`` (``step.start``) or
    ``"<parent>:<key>:<index>"`` (``step.start_many``); one longer than an id may be keeps
    its head and ends with a digest of the whole."""
    text = f"{parent_id}:{step_key}" if index is None else f"{parent_id}:{step_key}:{index}"
    if len(text) <= MAX_KEY_LENGTH:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:32]
    tail = "" if index is None else f":{index}"
    return f"{text[: MAX_KEY_LENGTH - len(digest) - len(tail) - 1]}~{digest}{tail}"


def capped_deadline(timeout: float | None, parent_deadline: datetime | None) -> datetime | None:
    """The deadline of an execution started now with ``timeout`` seconds (``None``: none)
    under a parent whose deadline is ``parent_deadline``: the earlier of the two."""
    own = None if timeout is None else clock.now() + timedelta(seconds=timeout)
    if own is None:
        return parent_deadline
    if parent_deadline is None:
        return own
    return min(own, parent_deadline)


# -- start --------------------------------------------------------------------------------


def start(ctx: StepContext) -> StepResult:
    """Insert the children, request their first runs and record the step, in one
    transaction fenced by the lease."""
    starts: ChildStarts = ctx.call.payload
    workflow = get_workflow(starts.workflow)
    parent = ctx.execution
    deadline = capped_deadline(workflow.timeout, parent.deadline)
    rows: list[_Child] = []
    for index, (args, kwargs, given) in enumerate(starts.children):
        bind_arguments(workflow, args, kwargs)
        input_json = encode_durable(
            {"args": list(args), "kwargs": kwargs},
            limits=ctx.limits,
            label=f'The arguments of workflow "{workflow.name}"',
        )
        if given is not None:
            check_text("execution id", given, empty=False)
        new_id = given or child_id(parent.id, ctx.key, None if starts.single else index)
        rows.append(_Child(new_id, input_json))
    ids = [row.id for row in rows]
    if len(set(ids)) != len(ids):
        raise ValueError("start_many() would start two children with the same execution id")
    if parent.id in ids:
        raise ValueError(f"execution {parent.id!r} cannot start itself as its child")
    encoded = encode_durable(ids, limits=ctx.limits, step_key=ctx.key)
    with ctx.atomic():
        existing: dict[str, tuple[str, str]] = {}
        for chunk in chunks(ids):
            for id, workflow_id, input_json in Execution.objects.filter(pk__in=chunk).values_list(
                "id", "workflow_id", "input_json"
            ):
                existing[id] = (workflow_id, input_json)
        new: list[_Child] = []
        for row in rows:
            found = existing.get(row.id)
            if found is None:
                new.append(row)
            elif found[0] != workflow.name:
                raise ExecutionConflictError(row.id, found[0], "workflow")
            elif found[1] != row.input_json:
                raise ExecutionConflictError(row.id, found[0], "arguments")
        if starts.queue is not None:
            _enqueue_children(starts, new, parent.id, deadline)
        else:
            _insert_children(workflow.name, new, parent.id, deadline)
            timers.request_runs([Wake(row.id, workflow.name) for row in new], reason="start")
        if deadline is not None and deadline != parent.deadline:
            # A deadline of the child's own (earlier than its parent's): a timer of its
            # own. One at the parent's is kept by the parent's cancel, which reaches it.
            for row in new:
                timers.schedule_timer(row.id, workflow.name, deadline, reason="deadline")
        ctx.record(encoded)
    return StepValue(_started(ctx, decode_durable(encoded)))


class _Child(NamedTuple):
    """A child a ``start`` step starts: its id and its arguments' durable JSON."""

    id: str
    input_json: str


def _insert_children(
    workflow: str, rows: list[_Child], parent: str, deadline: datetime | None
) -> None:
    """Create ``rows`` (new children of ``parent``, pending) in the current transaction: one
    statement per ``CHUNK`` on PostgreSQL (no model instance each), ``bulk_create`` on
    other databases."""
    if not rows:
        return
    now = timezone.now()
    connection = connections[yieldstar_settings.DATABASE_ALIAS]
    if connection.vendor != "postgresql":
        Execution.objects.bulk_create(
            [
                Execution(
                    id=row.id,
                    workflow_id=workflow,
                    input_json=row.input_json,
                    parent=parent,
                    deadline=deadline,
                    created_at=now,
                )
                for row in rows
            ],
            batch_size=CHUNK,
        )
        return
    statement = queries.of(connection).insert_children
    with connection.cursor() as cursor:
        for chunk in chunks(rows):
            cursor.execute(
                statement,
                [
                    workflow,
                    ExecutionStatus.PENDING.value,
                    parent,
                    deadline,
                    now,
                    now,
                    [row.id for row in chunk],
                    [row.input_json for row in chunk],
                ],
            )


def _enqueue_children(
    starts: ChildStarts, rows: list[_Child], parent: str, deadline: datetime | None
) -> None:
    """Start ``rows`` (new children) through ``starts.queue`` in the current transaction:
    each is admitted or waits for a slot as a ``Queue.start`` would."""
    from . import queues  # the queues sit above the starts this module shares

    queue = queues.get_queue(starts.queue or "")
    workflow = get_workflow(starts.workflow)
    for row in rows:
        arguments = decode_durable(row.input_json)
        queues.enqueue(
            queue,
            workflow,
            arguments["args"],
            arguments["kwargs"],
            key=starts.queue_key,
            priority=starts.priority,
            execution_id=row.id,
            parent=parent,
            deadline=deadline,
        )


def _started(ctx: StepContext, ids: list[str]) -> Any:
    starts: ChildStarts = ctx.call.payload
    return ids[0] if starts.single else ids


def _replay_start(ctx: StepContext) -> Any:
    return _started(ctx, recorded_value(ctx))


# -- wait ---------------------------------------------------------------------------------


def wait(ctx: StepContext) -> StepResult:
    """Return the results of the executions waited for if all finished; else register
    what is left and suspend until the last of them ends."""
    ids: tuple[str, ...] = ctx.call.payload
    unique = sorted(set(ids))
    me = ctx.execution_id
    if me in unique:
        raise ValueError(f"execution {me!r} cannot wait for itself")
    failure: BaseException | None = None
    suspend = False
    with ctx.atomic():
        statuses: dict[str, str] = {}
        for chunk in chunks(unique):
            # Locked in id order: serialized with each one's end, which updates its row.
            rows = (
                Execution.objects.select_for_update(no_key=True)
                .filter(pk__in=chunk)
                .order_by("pk")
                .values_list("id", "status", "awaited")
            )
            for id, status, awaited in rows:
                statuses[id] = (
                    status if status in TERMINAL_STATUSES else ("awaited" if awaited else "")
                )
        missing = [id for id in unique if id not in statuses]
        if missing:
            raise LookupError(f"step.wait(): no execution has the id {missing[0]!r}")
        ChildWait.objects.filter(execution_id=me, step_key=ctx.key).delete()
        unfinished = [id for id in unique if statuses[id] not in TERMINAL_STATUSES]
        if unfinished:
            fresh = [id for id in unfinished if statuses[id] != "awaited"]
            for chunk in chunks(fresh):
                Execution.objects.filter(pk__in=chunk).update(awaited=True)
            ChildWait.objects.bulk_create(
                [ChildWait(execution_id=me, step_key=ctx.key, awaited_id=id) for id in unfinished],
                batch_size=CHUNK,
            )
            # The waiter's own row last: an awaited execution's end holds its own row and
            # then counts this one down.
            Execution.objects.filter(pk=me).update(awaiting=len(unfinished))
            ctx.pend()
            suspend = True
        else:
            results, failure = _outcomes(ids)
            if failure is None:
                ctx.record(encode_durable(results, limits=ctx.limits, step_key=ctx.key))
    if suspend:
        raise Suspend(ExecutionStatus.WAITING, ctx.key)
    if failure is not None:
        return ctx.fail(failure)
    return StepValue(results)


def _outcomes(ids: Sequence[str]) -> tuple[list[Any], BaseException | None]:
    """The results of the finished executions ``ids``, in order, or the error of the first
    that did not complete."""
    found: dict[str, tuple[str, str, str]] = {}
    for chunk in chunks(sorted(set(ids))):
        for id, status, result_json, error_json in Execution.objects.filter(
            pk__in=chunk
        ).values_list("id", "status", "result_json", "error_json"):
            found[id] = (status, result_json, error_json)
    results: list[Any] = []
    for id in ids:
        status, result_json, error_json = found[id]
        error = decode_durable(error_json) if error_json else None
        if status == ExecutionStatus.FAILED:
            error = error or {}
            return [], ChildFailedError(
                id, str(error.get("type", "")), str(error.get("message", ""))
            )
        if status == ExecutionStatus.CANCELLED:
            reason = str(error.get("type", "")) if isinstance(error, dict) else ""
            return [], ChildCancelledError(id, reason)
        results.append(decode_durable(result_json) if result_json else None)
    return results, None


def wake_waiters(ended: Sequence[str]) -> int:
    """In the current transaction, which records the end of the executions ``ended``:
    delete the wait rows on them, count their waiters' ``awaiting`` down, and request a
    run of each waiter that waits for nothing more. Returns how many it woke. One
    statement per ``CHUNK`` ended executions on PostgreSQL."""
    connection = connections[yieldstar_settings.DATABASE_ALIAS]
    if connection.vendor == "postgresql":
        woken: list[Wake] = []
        statuses = sorted(TERMINAL_STATUSES)
        with connection.cursor() as cursor:
            for chunk in chunks(list(ended)):
                statement = queries.of(connection).wake_waiters.format(
                    ids=queries.placeholders(len(chunk))
                )
                cursor.execute(statement, [*chunk, *statuses])
                woken += [Wake(id, workflow_id) for id, workflow_id in cursor.fetchall()]
        timers.request_runs(woken, reason="awaited")
        return len(woken)
    waits: list[tuple[int, str]] = []
    for chunk in chunks(list(ended)):
        waits.extend(
            ChildWait.objects.filter(awaited_id__in=chunk).values_list("pk", "execution_id")
        )
    if not waits:
        return 0
    for pks in chunks([pk for pk, _ in waits]):
        ChildWait.objects.filter(pk__in=pks).delete()
    counts = Counter(waiter for _, waiter in waits)
    woken = []
    for waiter in sorted(counts):
        Execution.objects.filter(pk=waiter).update(
            awaiting=Greatest(F("awaiting") - counts[waiter], 0)
        )
        row = (
            Execution.objects.filter(pk=waiter)
            .exclude(status__in=TERMINAL_STATUSES)
            .values_list("awaiting", "workflow_id")
            .first()
        )
        if row is not None and row[0] == 0:
            woken.append(Wake(waiter, row[1]))
    timers.request_runs(woken, reason="awaited")
    return len(woken)


def tree(root: str) -> list[list[str]]:
    """The execution ``root`` and its descendants (through ``parent``), level by level."""
    levels = [[root]]
    seen = {root}
    while True:
        found: list[str] = []
        for chunk in chunks(levels[-1]):
            for id in Execution.objects.filter(parent__in=chunk).values_list("id", flat=True):
                if id not in seen:
                    seen.add(id)
                    found.append(id)
        if not found:
            return levels
        levels.append(sorted(found))


START = Kind(StepKind.START, start, _replay_start)
WAIT = Kind(StepKind.WAIT, wait)
