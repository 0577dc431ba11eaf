"""Execution leases: at most one worker runs an execution at a time.

A lease is an owner token and an expiry in the execution's row, taken by one conditional
UPDATE (free, or expired) and never by a transaction held open across user code. Taking
it acknowledges the execution's due wake intents (the run about to start satisfies them).
While a run lasts, the process's lease keeper thread extends it every second (every third
of ``LEASE_SECONDS`` if that is shorter) and moves its takeover timer, a durable timer just
after the expiry, in the same statement. A worker that dies stops extending it, and the
timer resumes the execution in another worker within ``LEASE_SECONDS`` plus a relay
interval. A wake that finds the lease held sets ``wake_pending``, and the holder runs the
workflow again before it lets the lease go, so no wake is lost; starting that run
(``Lease.run_again``) extends the lease and moves the timer like a renewal, and
acknowledges the due intents but the timer.

A lease taken inside a transaction (a caller's ``transaction.atomic``, a Django
``TestCase``'s) is kept by the run itself instead, on its own connection, between steps:
no other connection sees it until that transaction commits, so the keeper would find
nothing to renew; and none can take it over meanwhile (the row is locked, or not yet
visible), so a step that outlasts ``LEASE_SECONDS`` costs it nothing. By the time the
transaction commits, the run has released it.

The invariant: an execution that is not finished always has a live lease holder, or an
unacknowledged wake intent that the relay will deliver, or waiters and no due wake. A held
lease's takeover timer is never acknowledged (a takeover or the release ends it), so a
holder that dies at any moment leaves it pending, and retention, which deletes only
acknowledged intents, never deletes it.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import F, Q
from django.utils import timezone

from .. import clock, wakes
from ..conf import yieldstar_settings
from ..connector.client import in_callers_transaction
from ..connector.cursors import fetchone
from ..connector.hooks import KnownReads
from ..connector.waiters import LeaseFence
from ..core.commits import StoredState
from ..models.runtime import (
    TERMINAL_STATUSES,
    Execution,
    ExecutionRun,
    ExecutionStatus,
    ExecutionStep,
)
from ..sql import queries
from ..sql.queries import placeholders
from . import statements as sql, timers

logger = logging.getLogger("yieldstar_django.runtime")

__all__ = [
    "Lease",
    "LeaseLost",
    "acquire_lease",
    "mark_wake_pending",
    "reap_frozen_holders",
    "worker_name",
]

#: Seconds after a lease's expiry at which its takeover timer fires.
TAKEOVER_MARGIN = 0.25
#: Longest time between two renewals of a held lease, in seconds.
MAX_RENEW_INTERVAL = 1.0


class LeaseLost(Exception):
    """The run no longer holds its lease (it expired and was taken over, or the execution
    was cancelled or finished). The run stops without recording anything more."""


def lease_seconds() -> float:
    return float(yieldstar_settings.LEASE_SECONDS)


def _renew_interval() -> float:
    """Seconds between two renewals of a held lease: a third of ``LEASE_SECONDS``, at most
    ``MAX_RENEW_INTERVAL``."""
    return max(min(lease_seconds() / 3, MAX_RENEW_INTERVAL), 0.05)


_worker: tuple[int, str] | None = None


def worker_name() -> str:
    """``<host name>:<process id>``: the worker an ``ExecutionRun`` names (worked out once
    per process; a forked child works out its own)."""
    global _worker
    pid = os.getpid()
    if _worker is None or _worker[0] != pid:
        _worker = (pid, f"{socket.gethostname()}:{pid}"[:255])
    return _worker[1]


def live() -> Q:
    """Executions not in a terminal status."""
    return ~Q(status__in=TERMINAL_STATUSES)


@dataclass
class Lease:
    """A held lease. ``check()`` raises ``LeaseLost`` once the heartbeat saw it lost."""

    execution: Execution
    token: str
    expires_at: datetime
    timer: int | None = None
    lost: threading.Event = field(default_factory=threading.Event)
    #: The heap read with the lease (PostgreSQL), for the first run to use.
    heap: list[ExecutionStep] | None = None
    #: The stores the execution waits on, read with the lease (PostgreSQL), by (store
    #: name, store id, execution id, step key): ``(ledger result, row)``, each for the
    #: first read of its step in the first run (a ``CommitHook``'s ``reads``).
    reads: KnownReads | None = None
    #: Taken inside a transaction of the caller's: renewed by ``check()``, on the run's own
    #: connection, rather than by the process's lease keeper (see ``start_heartbeat``).
    in_transaction: bool = False
    #: When ``check()`` renews next (``time.monotonic()``), while it keeps the lease.
    renew_due: float | None = None

    @property
    def execution_id(self) -> str:
        return self.execution.id

    def owned(self) -> Q:
        """Rows of this execution still leased by this run and not finished."""
        return Q(pk=self.execution.id, lease_owner=self.token) & live()

    def fence(self, connection: BaseDatabaseWrapper) -> tuple[str, list[Any]]:
        """``owned()`` as SQL on the execution table: the condition and its parameters."""
        return sql.lease_fence_sql(connection), [
            self.execution.id,
            self.token,
            *sorted(TERMINAL_STATUSES),
        ]

    def waiter_fence(self) -> LeaseFence:
        """``owned()`` for a waiter's registration, which checks it in its own transaction
        (the share-locked execution row), so a run that lost its lease registers nothing."""
        return LeaseFence(self.token, tuple(sorted(TERMINAL_STATUSES)))

    def take_heap(self) -> list[ExecutionStep] | None:
        """The heap read at acquisition, once (later runs read it again)."""
        heap, self.heap = self.heap, None
        return heap

    def take_reads(self) -> KnownReads:
        """The stores read at acquisition, once (later runs read them again)."""
        reads, self.reads = self.reads, None
        return reads if reads is not None else {}

    def check(self) -> None:
        """Raise ``LeaseLost`` if the lease is gone. Called by the run before each step; for
        a lease kept by the run itself (``in_transaction``), first renews it if that is due,
        on the run's connection."""
        if self.renew_due is not None and time.monotonic() >= self.renew_due:
            self.renew()  # sets ``lost`` if the lease is gone
        if self.lost.is_set():
            raise LeaseLost(self.execution.id)

    def renew(self) -> bool:
        """Extend the lease by ``LEASE_SECONDS`` and move its takeover timer just after the
        new expiry (re-armed if it fired meanwhile); ``False`` (and ``lost`` set) if the
        lease is gone. One statement on PostgreSQL, a short transaction elsewhere."""
        return self._extend(run_again=False)

    def run_again(self) -> bool:
        """``renew``, for another run under the lease (a wake arrived during the run): also
        clear ``wake_pending`` and acknowledge the execution's due wake intents, which the
        run about to start satisfies, but not the takeover timer. The timer guards the
        lease, not a run: acknowledged, it would not fire if this worker died before its
        next renewal, and retention could delete it (``yieldstar_prune --intents-age``),
        leaving that renewal nothing to move. One statement on PostgreSQL."""
        return self._extend(run_again=True)

    def _extend(self, *, run_again: bool) -> bool:
        expires = timezone.now() + timedelta(seconds=lease_seconds())
        takeover = expires + timedelta(seconds=TAKEOVER_MARGIN)
        alias = yieldstar_settings.DATABASE_ALIAS
        connection = connections[alias]
        if connection.vendor == "postgresql" and self.timer is not None:
            adapt = connection.ops.adapt_datetimefield_value
            _, fence_params = self.fence(connection)
            params = [adapt(expires), *fence_params, adapt(takeover), adapt(takeover), self.timer]
            if run_again:
                now = adapt(clock.now())  # intents are due by the timers' clock
                params += [now, self.execution.id, now, self.timer]
            with connection.cursor() as cursor:
                cursor.execute(sql.renew_lease_sql(connection, run_again=run_again), params)
                row = cursor.fetchone()
            renewed = bool(row and row[0])
        else:
            changes: dict[str, Any] = {"lease_expires_at": expires}
            if run_again:
                changes["wake_pending"] = False
            with transaction.atomic(using=alias):
                renewed = bool(Execution.objects.filter(self.owned()).update(**changes))
                if renewed and self.timer is not None:
                    timers.rearm_timer(self.timer, takeover)
                if renewed and run_again:
                    wakes.acknowledge(self.execution.id, keep=self.timer, using=alias)
        if renewed:
            self.expires_at = expires
            if self.renew_due is not None:
                self.renew_due = time.monotonic() + _renew_interval()
        else:
            self.lost.set()
        return renewed

    def release(
        self,
        changes: dict[str, Any],
        *,
        unless_wake_pending: bool = False,
        acknowledge_all: bool = False,
        unless_awaited: bool = False,
    ) -> bool:
        """Apply ``changes`` and let the lease go (with its takeover timer), if still held.

        With ``unless_wake_pending`` nothing happens while a wake is flagged (the caller
        runs again instead). With ``acknowledge_all`` (the execution finished) every wake
        intent of the execution is marked delivered once it released. Returns whether it
        released. With ``unless_awaited`` nothing happens while another execution waits
        for this one (``awaited``; the caller releases it in a transaction that wakes that
        one). One statement on PostgreSQL.
        """
        outcome = str(changes.get("status", ""))
        changes = {**changes, "lease_owner": "", "lease_expires_at": None}
        alias = yieldstar_settings.DATABASE_ALIAS
        connection = connections[alias]
        if connection.vendor != "postgresql":
            rows = Execution.objects.filter(self.owned())
            if unless_wake_pending:
                rows = rows.filter(wake_pending=False)
            if unless_awaited:
                rows = rows.filter(awaited=False)
            released = bool(rows.update(**changes))
            if released:  # (informational: the release holds without it)
                ExecutionRun.objects.using(alias).filter(
                    execution_id=self.execution.id, lease_owner=self.token, ended_at=None
                ).update(ended_at=clock.now(), outcome=outcome)
            if released and self.timer is not None:
                timers.cancel_timer(self.timer)
            if released and acknowledge_all:
                wakes.acknowledge(self.execution.id, everything=True, using=alias)
            return released
        assignments, params = sql.set_clause(Execution, changes, connection)
        params += [*self.fence(connection)[1], self.timer]
        if acknowledge_all:
            params += [connection.ops.adapt_datetimefield_value(clock.now()), self.execution.id]
        params += [
            connection.ops.adapt_datetimefield_value(clock.now()),
            outcome,
            self.execution.id,
            self.token,
        ]
        statement = sql.release_lease_sql(
            connection,
            assignments,
            unless_wake_pending=unless_wake_pending,
            acknowledge_all=acknowledge_all,
            unless_awaited=unless_awaited,
        )
        row = fetchone(connection, statement, params)
        return bool(row and row[0])

    def start_heartbeat(self) -> None:
        """Keep this lease renewed while the run lasts: by the process's lease keeper, on a
        connection of its own; or, for a lease taken inside a transaction
        (``in_transaction``), by ``check()`` between steps, on the run's connection, which
        is the only one that sees it (a step that outlasts ``LEASE_SECONDS`` then leaves
        it expired in that transaction, which no other connection can take over)."""
        if self.in_transaction:
            self.renew_due = time.monotonic() + _renew_interval()
        else:
            _keeper.add(self)

    def stop_heartbeat(self) -> None:
        self.renew_due = None
        _keeper.remove(self)


class _LeaseKeeper:
    """One daemon thread per process that renews every lease held in the process every
    third of ``LEASE_SECONDS`` (a run shorter than that costs no thread and no query); not
    a lease taken inside a transaction, which its connection alone sees (``in_transaction``).

    It opens a database connection only to renew, and closes it after each round. A lease
    added while it sleeps wakes it, so the first renewal is never later than its interval
    (an idle keeper sleeps up to a second). A round that fails is logged and the keeper
    goes on; a keeper thread that is gone (in a forked child, the parent's is not alive) is
    started again by the next ``add``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._due: dict[int, tuple[Lease, float]] = {}
        self._wakeup = threading.Event()
        self._thread: threading.Thread | None = None
        self._asleep_until = 0.0  # when the keeper's current sleep ends (monotonic)

    def add(self, lease: Lease) -> None:
        with self._lock:
            due = time.monotonic() + _renew_interval()
            self._due[id(lease)] = (lease, due)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="yieldstar-leases", daemon=True
                )
                self._thread.start()
            early = due < self._asleep_until
        if early:  # (a lease due no earlier than the keeper wakes wakes no one)
            self._wakeup.set()

    def remove(self, lease: Lease) -> None:
        with self._lock:
            self._due.pop(id(lease), None)

    def _loop(self) -> None:
        while True:
            with self._lock:
                now = time.monotonic()
                due = [lease for lease, at in self._due.values() if at <= now]
                soonest = min((at for _, at in self._due.values()), default=now + 1.0)
                if not due:
                    sleep = min(max(soonest - now, 0.01), 1.0)
                    self._asleep_until = now + sleep
            if not due:
                self._wakeup.wait(sleep)
                self._wakeup.clear()  # an add() after this sets it again; one before is in _due
                continue
            for lease in due:
                self._renew(lease)  # logs what it cannot renew
            try:
                connections.close_all()
            except Exception:
                logger.exception("the lease keeper could not close its connections; it goes on")

    def _renew(self, lease: Lease) -> None:
        try:
            renewed = lease.renew()
        except Exception:
            logger.exception("could not renew the lease of %s", lease.execution_id)
            renewed = True  # try again next round; the lease may still be ours
        with self._lock:
            if id(lease) in self._due:
                if renewed:
                    self._due[id(lease)] = (lease, time.monotonic() + _renew_interval())
                else:
                    del self._due[id(lease)]


_keeper = _LeaseKeeper()


def acquire_lease(execution_id: str) -> Lease | None:
    """Take the execution's lease if it is free or expired and the execution is live and
    not ``queued`` (waiting for a slot of its queue: ``runtime/queues.py``).

    Atomically with it, acknowledges the execution's due wake intents and schedules a
    durable timer just after the lease's expiry, so the execution is resumed elsewhere if
    this worker dies. Returns ``None`` if the lease is
    held by another run, or the execution is finished or missing. On PostgreSQL this is
    one statement; elsewhere a short transaction. A lease taken inside a transaction of
    the caller's (``transaction.atomic``, or autocommit off) is ``in_transaction``.
    """
    token = uuid.uuid4().hex
    now = timezone.now()
    expires = now + timedelta(seconds=lease_seconds())
    takeover = expires + timedelta(seconds=TAKEOVER_MARGIN)
    alias = yieldstar_settings.DATABASE_ALIAS
    connection = connections[alias]
    in_transaction = in_callers_transaction(connection)
    if connection.vendor == "postgresql":
        lease = _acquire_postgres(
            alias, execution_id, token, now, expires, takeover, in_transaction=in_transaction
        )
        if lease is not None:
            lease.in_transaction = in_transaction
        return lease
    with transaction.atomic(using=alias):
        taken = (
            Execution.objects.filter(live(), pk=execution_id)
            .exclude(status=ExecutionStatus.QUEUED)
            .filter(Q(lease_owner="") | Q(lease_expires_at__lt=now))
            .update(
                lease_owner=token,
                lease_expires_at=expires,
                wake_pending=False,
                status=ExecutionStatus.RUNNING,
                runs=F("runs") + 1,
                updated_at=now,
            )
        )
        if not taken:
            return None
        wakes.acknowledge(execution_id, using=alias)
        execution = Execution.objects.get(pk=execution_id)
        ExecutionRun.objects.using(alias).create(
            execution_id=execution_id,
            number=execution.runs,
            lease_owner=token,
            worker=worker_name(),
            started_at=clock.now(),
        )
        timer = timers.schedule_timer(execution.id, execution.workflow_id, takeover, reason="lease")
    return Lease(execution, token, expires, timer, in_transaction=in_transaction)


def _acquire_postgres(
    alias: str,
    execution_id: str,
    token: str,
    now: datetime,
    expires: datetime,
    takeover: datetime,
    *,
    in_transaction: bool,
) -> Lease | None:
    """``acquire_lease`` in one round trip: UPDATE ... RETURNING, acknowledge the due
    intents, INSERT the timer. Its commit skips the WAL flush only when it is a transaction
    of its own (autocommit): inside the caller's, that would last until the caller's commit."""
    connection = connections[alias]
    fields = [f for f in Execution._meta.concrete_fields]
    statement = sql.acquire_lease_sql(connection, fields, HEAP_FIELDS, relaxed=not in_transaction)
    adapt = connection.ops.adapt_datetimefield_value
    params: list[Any] = [
        token,
        adapt(expires),
        ExecutionStatus.RUNNING.value,
        adapt(now),
        execution_id,
        *sorted(TERMINAL_STATUSES),
        adapt(now),
        adapt(clock.now()),  # intents are due by the timers' clock
        execution_id,
        adapt(clock.now()),
        "lease",
        adapt(takeover),
        adapt(takeover),
        adapt(now),
        worker_name(),
        adapt(clock.now()),
    ]
    row = fetchone(connection, statement, params)
    if row is None:
        return None
    execution = Execution.from_db(alias, [f.attname for f in fields], row[: len(fields)])
    timer, heap, waited = row[len(fields) :]
    steps = [_step_from_json(alias, values) for values in heap]
    reads: KnownReads = {
        (name, store_id, execution_id, key): (recorded, StoredState(instance, int(version), state))
        for key, name, store_id, instance, version, state, recorded in waited
    }
    return Lease(execution, token, expires, int(timer), heap=steps, reads=reads)


#: The heap columns a run needs, in the order the PostgreSQL acquisition returns them.
HEAP_FIELDS = (
    "id", "execution", "step_key", "position", "kind", "fingerprint", "status",
    "value_json", "error_json", "attempts", "wake_at", "created_at", "recorded_at",
)  # fmt: skip
_HEAP_TIMES = frozenset({"wake_at", "created_at", "recorded_at"})


def _step_from_json(alias: str, values: list[Any]) -> ExecutionStep:
    parsed = [
        datetime.fromisoformat(value) if name in _HEAP_TIMES and value is not None else value
        for name, value in zip(HEAP_FIELDS, values, strict=True)
    ]
    attnames = [ExecutionStep._meta.get_field(name).attname for name in HEAP_FIELDS]  # type: ignore[union-attr]
    return ExecutionStep.from_db(alias, attnames, parsed)


def reap_frozen_holders(using: str) -> list[tuple[str, int]]:
    """The relay's upkeep (``wakes.relay.every_round``, PostgreSQL): end the transaction of
    every run whose lease expired while its connection still blocks another backend; the
    execution id and backend pid of each one ended.

    A worker frozen mid-transaction (SIGSTOP, a VM paused, a debugger) keeps the row locks
    of a store commit it had begun, and every other writer of that store waits for them;
    the lease fences what the frozen run writes afterwards, but nothing else ends its
    transaction. Its lease expires (no renewal for ``LEASE_SECONDS``) and the relay then
    terminates the backend that took the lease (``Execution.lease_backend``) if it still
    blocks a lock, so the other writers wait at most about the lease plus a relay
    interval. The run's transaction rolls back: nothing it had not committed is kept, and
    its successor runs the step again. When the frozen worker resumes it finds its
    connection closed and its lease lost. Needs the privilege to signal the workers'
    backends (the same role, or ``pg_signal_backend``); without it this logs a warning
    once and does nothing. A relay of another database leaves it alone.

    Behind a transaction pooler (``POOLER = "transaction"``) it does nothing either: there
    the backend that took a lease serves other clients' transactions afterwards, and the
    frozen run's transaction runs on any of the pooler's server connections, so the pid
    names no worker and ending it would roll back someone else's transaction. PostgreSQL's
    ``idle_in_transaction_session_timeout`` ends a frozen holder's transaction there
    (docs/operations/database.md#connection-poolers)."""
    if using != yieldstar_settings.DATABASE_ALIAS or yieldstar_settings.POOLER == "transaction":
        return []
    connection = connections[using]
    if connection.vendor != "postgresql":
        return []
    with connection.cursor() as cursor:
        cursor.execute(queries.of(connection).lock_blockers)
        blockers = [int(row[0]) for row in cursor.fetchall()]
        if not blockers:
            return []
        statement = queries.of(connection).terminate_frozen_holders.format(
            pids=placeholders(len(blockers))
        )
        adapt = connection.ops.adapt_datetimefield_value
        try:
            cursor.execute(statement, [*blockers, adapt(timezone.now())])
        except DatabaseError:
            global _reap_refused
            if not _reap_refused:
                _reap_refused = True
                logger.warning(
                    "the relay could not end a frozen lease holder's transaction; grant its "
                    "role pg_signal_backend, or run it as the workers' role",
                    exc_info=True,
                )
            return []
        ended = [(str(e), int(pid)) for e, pid in cursor.fetchall()]
    for execution_id, pid in ended:
        logger.warning(
            "execution %s: its lease expired while backend %d still held locks others wait "
            "for (a frozen worker?); ended that backend's transaction",
            execution_id,
            pid,
        )
    return ended


#: Whether ``reap_frozen_holders`` was refused already (logged once).
_reap_refused = False


def mark_wake_pending(execution_id: str) -> bool:
    """Flag a wake for the current, unexpired lease holder. ``False`` if there is none."""
    return bool(
        Execution.objects.filter(
            live(),
            pk=execution_id,
            lease_expires_at__isnull=False,
            lease_expires_at__gte=timezone.now(),
        ).update(wake_pending=True)
    )
