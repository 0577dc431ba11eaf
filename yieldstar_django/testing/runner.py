"""Running executions in the test process: the ``inline`` wake backend,
``run_until_idle`` and ``advance_time`` (which fires the schedules' due ticks).

Both hand executions to one per-thread queue that runs them one after another with
``run_execution`` (what the Celery task does), so a run that wakes another execution
never runs it nested inside its own step: the woken one runs right after. The queue runs
for a limited wall time (``run_until_idle``'s ``timeout``, or :data:`INLINE_TIMEOUT` for
what a commit woke): executions that keep waking each other never empty it, and a run
still going when it is over stops before its next step (``engine.run_deadline``). Plain
Python code that never reaches a step (a loop in the workflow between steps, or in a
step's function) cannot be stopped: nothing interrupts a running Python function safely.

A run whose workflow is not registered in the process runs nothing (``run_execution``
answers ``deferred`` and sets a timer): it is not counted, and ``run_until_idle`` raises
``UnregisteredWorkflowError`` once only such executions are left.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from django.db import connections
from django.db.models import Min, Q

from .. import clock
from ..conf import yieldstar_settings
from ..core.results import Wake
from ..models.claim_leases import ClaimLeaseRecord, ClaimLeaseState
from ..models.runtime import TERMINAL_STATUSES, Execution
from ..models.stores import WakeIntent
from ..runtime.claim_leases import expire_for_relay
from ..runtime.engine import RunCutOff, run_deadline
from ..runtime.executions import ResumeResult, run_execution
from ..runtime.leases import live
from ..runtime.registry import get_workflow
from ..runtime.schedules import fire_due_schedules, sync_code_schedules
from ..wakes import OnCommitDelivery, PendingWake

__all__ = [
    "ExecutionNotFinishedError",
    "UnregisteredWorkflowError",
    "advance_time",
    "fire_schedules",
    "inline",
    "next_timer",
    "run_until_complete",
    "run_until_idle",
]

#: What ``run_execution`` answers when it ran the execution (not ``gone``/``busy``);
#: ``deferred`` only when its workflow is registered (it made its most runs in a row).
_RAN = frozenset({"finished", "suspended", "deferred", "lost"})


class UnregisteredWorkflowError(LookupError):
    """``run_until_idle`` left executions it cannot run: their workflow is not registered
    in this process (its module was not imported, say), so each of their runs is deferred.
    ``executions`` maps each execution id to its workflow's name."""

    def __init__(self, executions: dict[str, str]) -> None:
        self.executions = executions
        listed = ", ".join(f"{e} (workflow {w!r})" for e, w in sorted(executions.items())[:10])
        super().__init__(
            f"run_until_idle: executions whose workflow is not registered in this process "
            f"cannot run here (each run is deferred): {listed}; import the module that "
            "defines the workflow before running them"
        )


class ExecutionNotFinishedError(AssertionError):
    """``run_until_complete`` stopped with the execution not finished: nothing more is due
    and no timer is set (``reason == "idle"``: it waits on a store nobody will change, say),
    or its next timer lies past ``max_time`` (``reason == "max_time"``). The execution is
    left as it is: ``status``, ``waiting_on`` (the step key it is suspended on) and
    ``next_timer`` (the clock time of the next timer, ``None`` if none) say where it
    stopped. An ``AssertionError``, so a test reports it as a failed expectation."""

    def __init__(
        self,
        execution_id: str,
        *,
        reason: str,
        status: str,
        waiting_on: str,
        next_timer: datetime | None,
        max_time: float | None = None,
    ) -> None:
        self.execution_id = execution_id
        self.reason = reason
        self.status = status
        self.waiting_on = waiting_on
        self.next_timer = next_timer
        self.max_time = max_time
        where = f"status {status!r}" + (f", suspended on step {waiting_on!r}" if waiting_on else "")
        if reason == "max_time":
            why = (
                f"its next timer is due at {next_timer.isoformat() if next_timer else '?'}, "
                f"more than max_time={max_time:g}s after the clock stood when the call began"
            )
        else:
            why = "nothing is due and no timer is set (it waits on a store no one changes?)"
        super().__init__(
            f"run_until_complete: execution {execution_id!r} ({where}) did not finish: {why}"
        )


#: Seconds of wall time the inline backend runs what one commit woke (and what those runs
#: woke, and so on) before it gives up, raising ``TimeoutError``: the executions still due
#: stay due (their wake intents unacknowledged) for ``run_until_idle``, whose own timeout
#: then raises. Without a limit, executions that keep waking each other would never let
#: the waking write return.
INLINE_TIMEOUT: Final = 10.0


class _Queue(threading.local):
    def __init__(self) -> None:
        self.ids: deque[str] = deque()
        self.draining = False
        self.runs = 0


_queue = _Queue()


def _drain(deadline: float) -> list[str]:
    """Run every queued execution (and what those runs wake) unless already draining;
    return the ones still queued when the ``time.monotonic()`` ``deadline`` passed, a run
    cut off then first (they are not run: their wake intents stay unacknowledged, so they
    stay due)."""
    if _queue.draining:
        return []  # the drain under way runs them, within its own deadline
    _queue.draining = True
    token = run_deadline.set(deadline)
    try:
        while _queue.ids:
            if time.monotonic() > deadline:
                return list(_queue.ids)
            execution_id = _queue.ids.popleft()
            try:
                result = run_execution(execution_id)
            except RunCutOff:
                return [execution_id, *_queue.ids]
            if str(result) in _RAN and not (
                result == ResumeResult.DEFERRED and _unregistered(execution_id)
            ):
                _queue.runs += 1
        return []
    finally:
        run_deadline.reset(token)
        _queue.draining = False
        _queue.ids.clear()


def _registered(workflow_id: str) -> bool:
    try:
        get_workflow(workflow_id)
    except LookupError:
        return False
    return True


def _unregistered(execution_id: str) -> bool:
    """Whether the execution's workflow is not registered here (a deferral that ran
    nothing)."""
    workflow_id = Execution.objects.filter(pk=execution_id).values_list("workflow_id").first()
    return workflow_id is not None and not _registered(workflow_id[0])


def _stranded(alias: str) -> dict[str, str]:
    """Live executions with a wake to come whose workflow is not registered here: what
    is left when only deferred runs remain (execution id -> workflow)."""
    rows = WakeIntent.objects.using(alias).filter(delivered_at__isnull=True)
    found = {
        execution_id: workflow_id
        for execution_id, workflow_id in rows.values_list("execution_id", "workflow_id").distinct()
        if not _registered(workflow_id)
    }
    if not found:
        return {}
    alive = Execution.objects.using(alias).filter(live(), pk__in=list(found))
    return {pk: found[pk] for pk in alive.values_list("pk", flat=True)}


def _still_due(who: str, timeout: float, execution_ids: Iterable[str]) -> TimeoutError:
    ids = sorted(set(execution_ids))
    return TimeoutError(f"{who}: executions still due after {timeout}s: {', '.join(ids[:10])}")


def _enqueue(execution_ids: Iterable[str]) -> None:
    for execution_id in execution_ids:
        if execution_id not in _queue.ids:
            _queue.ids.append(execution_id)


def inline(wakes: Sequence[Wake]) -> None:
    """A ``WAKE_BACKEND`` for tests: run each woken execution in this process, now.

    It is called once the waking transaction has committed (wake delivery is an
    ``on_commit`` hook), so the run sees what woke it. No broker, no worker. An error of the
    runtime propagates (the wake stays undelivered); an error of the workflow is recorded
    on the execution, as in production.

    It runs them, and what they wake, for at most :data:`INLINE_TIMEOUT` seconds, then
    raises ``TimeoutError`` (logged by the wake delivery, which carries on): what is
    still due stays due, for :func:`run_until_idle`.
    """
    _enqueue(wake.execution_id for wake in wakes)
    left = _drain(time.monotonic() + INLINE_TIMEOUT)
    if left:
        raise _still_due("the inline wake backend", INLINE_TIMEOUT, left)


def advance_time(seconds: float | timedelta) -> None:
    """Move the clock of durable timers ahead by ``seconds`` (or a ``timedelta``): ``step.sleep``,
    ``RetryableError`` delays, schedules and every scheduled wake read it.

    The schedules' ticks that came due are fired, as the relay would fire them: each starts
    its execution (the inline backend runs it at once; otherwise :func:`run_until_idle`
    does). The schedules defined in code are copied to the table before the clock moves,
    so a tick within the move is due. Nothing else runs here: call :func:`run_until_idle`
    to run what became due. The clock stays moved until ``yieldstar_django.clock.reset()``
    (the pytest fixtures and ``YieldstarTestMixin`` reset it after each test).
    ``ValueError`` (the clock unchanged) for negative or non-finite ``seconds``, or a move
    that would leave less than 100 years (the longest durable timer) before the year 9999.
    In a pytest test without database access only the clock moves.
    """
    alias = _alias()
    if _database_blocked():  # a test without database access: only the clock moves
        clock.advance(seconds)
        return
    sync_code_schedules(alias)
    clock.advance(seconds)
    fire_schedules(alias)


def _database_blocked() -> bool:
    """Whether pytest-django blocks database access in this test (no ``db`` fixture)."""
    from django.db.backends.base.base import BaseDatabaseWrapper

    return getattr(BaseDatabaseWrapper.ensure_connection, "__name__", "") == "_blocking_wrapper"


def fire_schedules(alias: str) -> int:
    """Fire every due schedule tick by the test clock, round after round until none is due
    (``catch_up="all"`` fires at most a batch a round); return how many ticks fired."""
    fired = 0
    while True:
        count = fire_due_schedules(alias)
        if not count:
            return fired
        fired += count


def _alias() -> str:
    return yieldstar_settings.DATABASE_ALIAS


def _held_back(alias: str) -> list[PendingWake]:
    """Take the wakes that ``on_commit`` hooks of the current, uncommitted transaction hold
    (a ``TestCase``'s transaction never commits), as ``captureOnCommitCallbacks`` would."""
    connection = connections[alias]
    if not connection.in_atomic_block:
        return []
    held: list[PendingWake] = []
    kept: list[Any] = []
    for entry in connection.run_on_commit:
        callback = entry[1]
        if isinstance(callback, OnCommitDelivery) and callback.using == alias:
            held.extend(callback.pending)
        else:
            kept.append(entry)
    connection.run_on_commit[:] = kept
    return held


def _due(alias: str, now: datetime) -> list[PendingWake]:
    """Unacknowledged intents due by ``now``: every immediate wake (no ``due_at``; its
    ``available_at`` is when the relay would deliver it again, not when it is due) and
    every timer whose ``due_at`` has come."""
    rows = WakeIntent.objects.using(alias).filter(
        Q(due_at__isnull=True) | Q(due_at__lte=now), delivered_at__isnull=True
    )
    return [
        PendingWake(pk, Wake(execution_id, workflow_id))
        for pk, execution_id, workflow_id in rows.order_by("available_at", "pk").values_list(
            "pk", "execution_id", "workflow_id"
        )
    ]


def _mark_delivered(alias: str, pending: Sequence[PendingWake]) -> None:
    WakeIntent.objects.using(alias).filter(
        pk__in=[p.intent_id for p in pending], delivered_at__isnull=True
    ).update(delivered_at=clock.now())


def _require_timeout(timeout: object) -> float:
    """``timeout`` as seconds: ``TypeError`` unless a number (not a ``bool``),
    ``ValueError`` if negative or NaN (``math.inf`` is no limit)."""
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise TypeError(f"run_until_idle() needs timeout in seconds (a number), not {timeout!r}")
    if math.isnan(timeout) or timeout < 0:
        raise ValueError(f"run_until_idle() needs timeout >= 0 seconds, not {timeout}")
    return float(timeout)


def next_timer(using: str | None = None) -> datetime | None:
    """The clock time of the next thing that will become due by the timers' clock: the
    earliest unacknowledged durable timer not due yet (a sleep, a retry, a ``take_any``
    timeout), or the earliest expiry of a held leased claim; ``None`` if there is none."""
    alias = using or _alias()
    now = clock.now()
    timer = (
        WakeIntent.objects.using(alias)
        .filter(delivered_at__isnull=True, due_at__gt=now)
        .aggregate(at=Min("due_at"))["at"]
    )
    expiry = (
        ClaimLeaseRecord.objects.using(alias)
        .filter(state=ClaimLeaseState.HELD, expires_at__gt=now)
        .aggregate(at=Min("expires_at"))["at"]
    )
    found = [at for at in (timer, expiry) if at is not None]
    return min(found) if found else None


def _require_max_time(max_time: object) -> float | None:
    """``max_time`` as seconds (``None``: no limit); ``TypeError``/``ValueError`` as for
    ``advance_time``."""
    if max_time is None:
        return None
    if isinstance(max_time, timedelta):
        max_time = max_time.total_seconds()
    if isinstance(max_time, bool) or not isinstance(max_time, int | float):
        raise TypeError(f"max_time must be a number of seconds or a timedelta, not {max_time!r}")
    if math.isnan(max_time) or max_time < 0:
        raise ValueError(f"max_time must be >= 0 seconds, not {max_time}")
    return float(max_time)


def _skip_to(at: datetime) -> None:
    """Move the clock forward to ``at`` (nothing if it is there already)."""
    ahead = (at - clock.now()).total_seconds()
    if ahead > 0:
        clock.advance(ahead)


def run_until_idle(
    timeout: float = 10.0,
    *,
    skip_timers: bool = False,
    max_time: float | timedelta | None = None,
) -> int:
    """Run every execution that is due, in this process, until none is; return how many
    runs it made.

    Due are: wakes whose transaction committed and that no backend has delivered yet,
    wakes held back by ``on_commit`` hooks of the current test transaction (in a
    ``TestCase``, which never commits), and durable timers (sleeps, retries, ``take_any``
    timeouts) whose time has come by the clock that :func:`advance_time` moves. Leased
    claims that expired by that clock are handed back first, and the schedules' due ticks
    fired, as the relay does. Runs
    those executions, then what those runs woke or made due, and so on. Works whatever
    ``WAKE_BACKEND`` is.

    Raises ``TimeoutError`` if executions are still due after ``timeout`` seconds of wall
    time (a workflow that keeps waking itself, say), also while the inline backend runs
    what its runs wake; a run still going then stops before its next step (what it
    recorded stays). A run that never reaches a step (plain Python looping) cannot be
    stopped, and the limit waits for it.

    Raises ``UnregisteredWorkflowError`` naming them when only executions whose workflow
    is not registered in this process are left: their runs are deferred (and not counted).
    A ``timeout`` that is not a number is a ``TypeError``, a negative or NaN one a
    ``ValueError`` (nothing runs); ``math.inf`` sets no limit.

    With ``skip_timers=True``, once nothing is due it moves the clock to the next timer
    (:func:`next_timer`: a sleep, a retry, a ``take_any`` timeout, a leased claim's
    expiry) and runs what became due, again and again until no timer is left, or the
    next one lies more than ``max_time`` (seconds or a ``timedelta``; ``None``: no limit)
    past the clock as it stood when the call began: the clock then stays at the last timer
    it fired. A workflow that sets timers forever (a loop around a sleep) ends with the
    ``timeout``'s ``TimeoutError`` unless a ``max_time`` stops it first.
    """
    seconds = _require_timeout(timeout)
    limit = _require_max_time(max_time)
    deadline = time.monotonic() + seconds
    if not skip_timers:
        return _run_due(deadline, seconds)
    start = clock.now()
    runs = 0
    while True:
        runs += _run_due(deadline, seconds)
        at = next_timer()
        if at is None or (limit is not None and (at - start).total_seconds() > limit):
            return runs
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"run_until_idle: timers still set after {seconds}s (next at {at.isoformat()})"
            )
        _skip_to(at)


def _run_due(deadline: float, timeout: float) -> int:
    """Run what is due until nothing is (``run_until_idle`` without skipping)."""
    alias = _alias()
    runs_before = _queue.runs
    while True:
        expire_for_relay(alias)  # leased claims past their expiry go back, as the relay does
        fire_schedules(alias)  # due ticks start their executions, as the relay does
        pending = _held_back(alias) + _due(alias, clock.now())
        if not pending:
            stranded = _stranded(alias)
            if stranded:
                raise UnregisteredWorkflowError(stranded)
            return _queue.runs - runs_before
        if time.monotonic() > deadline:
            raise _still_due("run_until_idle", timeout, (p.wake.execution_id for p in pending))
        _enqueue(p.wake.execution_id for p in pending)
        left = _drain(deadline)
        if left:
            raise _still_due("run_until_idle", timeout, left)
        _mark_delivered(alias, pending)


def run_until_complete(
    execution_id: str,
    *,
    skip_timers: bool = True,
    max_time: float | timedelta | None = None,
    timeout: float = 10.0,
) -> Execution:
    """Run what is due until the execution ``execution_id`` finishes; return it (as
    ``get_execution`` does: ``completed``, ``failed`` or ``cancelled``).

    Like Temporal's time-skipping test environment: with ``skip_timers=True`` (the
    default) each time nothing is due it moves the clock to the next timer
    (:func:`next_timer`: any execution's sleep, retry or ``take_any`` timeout, or a leased
    claim's expiry) and runs what became due, so a workflow with a one-hour timeout then a
    one-day sleep finishes in one call. Other executions run too, as the relay would run
    them. Raises :class:`ExecutionNotFinishedError` when the execution has not finished
    and nothing more can happen (``reason == "idle"``: no timer left, or ``skip_timers``
    is False), or when its next timer lies more than ``max_time`` (seconds or a
    ``timedelta``; ``None``: no limit) past the clock as it stood when the call began
    (``reason == "max_time"``); the clock then stays at the last timer it fired.
    ``TimeoutError`` past ``timeout`` seconds of wall time, and
    ``UnregisteredWorkflowError``, as :func:`run_until_idle`. ``Execution.DoesNotExist``
    for an id no execution has.
    """
    seconds = _require_timeout(timeout)
    limit = _require_max_time(max_time)
    alias = _alias()
    rows = Execution.objects.using(alias)
    rows.get(pk=execution_id)  # DoesNotExist before anything runs
    deadline = time.monotonic() + seconds
    start = clock.now()
    while True:
        _run_due(deadline, seconds)
        execution = rows.get(pk=execution_id)
        if execution.status in TERMINAL_STATUSES:
            return execution
        at = next_timer(alias) if skip_timers else None
        if at is None or (limit is not None and (at - start).total_seconds() > limit):
            raise ExecutionNotFinishedError(
                execution_id,
                reason="idle" if at is None else "max_time",
                status=execution.status,
                waiting_on=execution.waiting_on,
                next_timer=at,
                max_time=limit,
            )
        if time.monotonic() > deadline:
            raise _still_due("run_until_complete", seconds, [execution_id])
        _skip_to(at)
