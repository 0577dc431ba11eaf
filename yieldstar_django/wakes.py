"""Durable wakes: the outbox of wake intents, the wake backends, and the relay.

A wake asks for an execution to be resumed; it carries no copy of the event (the execution
re-reads the store when it runs). Every wake is first written as a ``WakeIntent`` row in
the transaction that requires it, so once that transaction is durable the wake is durable
too. Then:

- **Immediate wakes** (a mutation woke a waiter, a stale waiter registered, ``wake_now``) are
  handed to the ``WAKE_BACKEND`` by ``transaction.on_commit``; nothing more is written on
  the committing path. A failure there is logged and never raised into the committed write.
- **The relay** (``python manage.py yieldstar_relay``, or the Celery beat task
  ``yieldstar_django.relay_wakes``) delivers every intent not yet acknowledged once its
  ``available_at`` has passed: ``RELAY_DELAY`` after the commit for an immediate wake
  that has not taken effect by then (broker down, process killed after the commit, a worker
  killed with the message prefetched), the due time for a durable timer
  (``schedule_wake``). Each delivery pushes ``available_at`` back by a growing delay
  (``RELAY_DELAY`` doubled per delivery, at most ``MAX_RETRY_DELAY``).
- **Acknowledgement** (``acknowledge``): an intent is done when the wake took effect, not
  when a broker accepted it: when a run of the execution starts (takes the lease, or runs
  again under it) after the intent was due, or the execution finished. The runtime
  acknowledges in the statement that takes the lease.

Delivery is at least once: a wake may be delivered twice (the relay and a slow worker
racing), and several wakes of one execution may be coalesced into one; a wake is never
lost. ``resume_execution`` is idempotent, so a duplicate costs one spurious run.

This module does not import the models, so it can be imported before the app registry is
ready; it writes the ``yieldstar_wakeintent`` table with SQL.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import FrameType
from typing import Any, Final

from celery import shared_task
from django.db import close_old_connections, connections, transaction
from django.utils import timezone

from . import clock, relay_log
from .conf import yieldstar_settings
from .core.results import Wake

__all__ = [
    "ACK_CONDITION",
    "INTENT_TABLE",
    "RESUME_TASK",
    "PendingWake",
    "acknowledge",
    "celery_backend",
    "deliver_wakes",
    "relay_once",
    "relay_wakes",
    "run_relay",
    "schedule_wake",
    "wake_now",
]

logger = logging.getLogger("yieldstar_django.wakes")

#: The Celery task a wake enqueues (implemented in :mod:`yieldstar_django.tasks`).
RESUME_TASK: Final = "yieldstar_django.resume_execution"
#: The table of :class:`yieldstar_django.models.WakeIntent`.
INTENT_TABLE: Final = "yieldstar_wakeintent"
#: Longest pause before the relay retries an intent whose delivery failed, in seconds.
MAX_RETRY_DELAY: Final = 300.0
#: Longest error text kept on an intent.
MAX_ERROR_LENGTH: Final = 2000


@dataclass(frozen=True)
class PendingWake:
    """A written wake intent (``intent_id``) and the wake it stands for."""

    intent_id: int
    wake: Wake


# --- backends -------------------------------------------------------------------------


def celery_backend(wakes: Sequence[Wake]) -> None:
    """The default ``WAKE_BACKEND``: enqueue ``resume_execution(execution_id)`` per wake.

    Uses the current Celery app (the one the project configures). Raises when the broker
    refuses a message, or when that app is Celery's unconfigured default
    (``UnconfiguredCeleryApp``); the relay then retries the wakes not marked delivered.
    While Django's test environment is set up it refuses to publish
    (``BrokerInTestsError``) unless ``PUBLISH_IN_TESTS`` is set.
    """
    from .celery_app import require_configured_app
    from .testing.guard import refuse_in_tests

    app = require_configured_app()
    refuse_in_tests(app)
    for wake in wakes:
        app.send_task(RESUME_TASK, args=[wake.execution_id])


def _coalesce(wakes: Iterable[Wake]) -> list[Wake]:
    seen: dict[str, Wake] = {}
    for wake in wakes:
        seen.setdefault(wake.execution_id, wake)
    return list(seen.values())


def _now() -> datetime:
    """When intents are due: the timers' clock (:mod:`yieldstar_django.clock`)."""
    return clock.now()


def _adapt(using: str, value: datetime) -> Any:
    return connections[using].ops.adapt_datetimefield_value(value)


def _is_postgres(using: str) -> bool:
    return connections[using].vendor == "postgresql"


def _in_clause(count: int) -> str:
    return ", ".join(["%s"] * count)


#: The intents of one execution (``%s``) that a run starting at ``%s`` satisfies: not yet
#: acknowledged and due (an immediate wake is due when written, a timer at ``due_at``).
ACK_CONDITION: Final = (
    "execution_id = %s AND delivered_at IS NULL AND COALESCE(due_at, created_at) <= %s"
)


def acknowledge(execution_id: str, *, everything: bool = False, using: str = "default") -> int:
    """Mark the execution's due intents done (all of them with ``everything``, for an
    execution that finished); return how many. Call it when a run starts, after the
    lease is held, or when the execution is finished: those intents took effect."""
    now = _adapt(using, _now())
    with connections[using].cursor() as cursor:
        if everything:
            cursor.execute(
                f"UPDATE {INTENT_TABLE} SET delivered_at = %s "
                "WHERE execution_id = %s AND delivered_at IS NULL",
                [now, execution_id],
            )
        else:
            cursor.execute(
                f"UPDATE {INTENT_TABLE} SET delivered_at = %s WHERE {ACK_CONDITION}",
                [now, execution_id, now],
            )
        return int(cursor.rowcount)


def _redelivery_delay(deliveries: int, *, failed: bool) -> float:
    """Seconds before an intent delivered ``deliveries`` times before is delivered again:
    ``RELAY_DELAY`` (``RELAY_INTERVAL`` after a failed delivery) doubled per earlier
    delivery, at most ``MAX_RETRY_DELAY``."""
    interval = float(yieldstar_settings.RELAY_INTERVAL)
    base = interval if failed else max(float(yieldstar_settings.RELAY_DELAY), interval)
    return float(min(MAX_RETRY_DELAY, base * 2 ** min(deliveries, 20)))


def _push_back(using: str, intent_ids: Sequence[int], error: str | None = None) -> None:
    """Count a delivery on each intent and move its ``available_at`` to when the relay
    should deliver it again if it has not been acknowledged by then (and record
    ``error``, for a failed delivery). One statement per distinct delivery count."""
    if not intent_ids:
        return
    now = _now()
    with connections[using].cursor() as cursor:
        cursor.execute(
            f"SELECT id, attempts FROM {INTENT_TABLE} WHERE id IN ({_in_clause(len(intent_ids))})",
            list(intent_ids),
        )
        by_attempts: dict[int, list[int]] = {}
        for intent_id, attempts in cursor.fetchall():
            by_attempts.setdefault(int(attempts), []).append(int(intent_id))
        for attempts, ids in by_attempts.items():
            delay = _redelivery_delay(attempts, failed=error is not None)
            at = _adapt(using, now + timedelta(seconds=delay))
            error_sql = ", last_error = %s" if error is not None else ""
            params: list[Any] = [at, *([error] if error is not None else []), *ids]
            cursor.execute(
                f"UPDATE {INTENT_TABLE} SET attempts = attempts + 1, available_at = %s"
                f"{error_sql} WHERE id IN ({_in_clause(len(ids))}) AND delivered_at IS NULL",
                params,
            )


def _record_failure(using: str, intent_ids: Sequence[int], error: BaseException) -> None:
    """Count a failed delivery on each intent and push its ``available_at`` back."""
    _push_back(using, intent_ids, f"{type(error).__name__}: {error}"[:MAX_ERROR_LENGTH])


# --- delivery -------------------------------------------------------------------------


def deliver_wakes(pending: Sequence[PendingWake], *, using: str = "default") -> bool:
    """Hand ``pending`` wakes to the ``WAKE_BACKEND``.

    Wakes of one execution are coalesced into one. Returns whether the backend accepted
    them. Nothing is written when it did: the intents stay unacknowledged until a run of
    the execution starts, and the relay delivers them again if none has by their
    ``available_at``. Never raises: a failure is logged and recorded on the intents (best
    effort). Called by ``on_commit`` after a commit that woke executions; call it only for
    intents whose transaction has committed.
    """
    if not pending:
        return True
    ids = [p.intent_id for p in pending]
    try:
        backend = yieldstar_settings.wake_backend
        backend(_coalesce(p.wake for p in pending))
    except Exception as exc:
        logger.warning(
            "wake backend failed for %d wake(s); the relay will retry them",
            len(pending),
            exc_info=True,
        )
        try:
            _record_failure(using, ids, exc)
        except Exception:
            logger.warning("could not record the failed delivery", exc_info=True)
        return False
    return True


def deliver_on_commit(pending: Sequence[PendingWake], *, using: str = "default") -> None:
    """Deliver ``pending`` when the current transaction on ``using`` commits (now, in
    autocommit mode); nothing is delivered if it rolls back."""
    if pending:
        transaction.on_commit(OnCommitDelivery(tuple(pending), using), using=using)


@dataclass(frozen=True)
class OnCommitDelivery:
    """The ``on_commit`` hook of :func:`deliver_on_commit` (named, so that
    ``yieldstar_django.testing`` can find the wakes a test transaction holds back)."""

    pending: tuple[PendingWake, ...]
    using: str

    def __call__(self) -> None:
        deliver_wakes(self.pending, using=self.using)


def _insert_intents(
    using: str,
    wakes: Sequence[Wake],
    reason: str,
    available_at: datetime,
    due_at: datetime | None = None,
) -> list[PendingWake]:
    now = _adapt(using, _now())
    at = _adapt(using, available_at)
    due = None if due_at is None else _adapt(using, due_at)
    pending: list[PendingWake] = []
    with connections[using].cursor() as cursor:
        for wake in wakes:
            cursor.execute(
                f"INSERT INTO {INTENT_TABLE} (execution_id, workflow_id, reason, available_at, "
                "due_at, delivered_at, attempts, last_error, created_at) "
                "VALUES (%s, %s, %s, %s, %s, NULL, 0, '', %s) RETURNING id",
                [wake.execution_id, wake.workflow_id, reason, at, due, now],
            )
            row = cursor.fetchone()
            assert row is not None
            pending.append(PendingWake(int(row[0]), wake))
    return pending


def write_intents(
    wakes: Sequence[Wake], *, reason: str, using: str = "default"
) -> list[PendingWake]:
    """Write immediate wake intents in the current transaction (``available_at`` = now +
    ``RELAY_DELAY``) and return them; the caller delivers them on commit."""
    delay = timedelta(seconds=float(yieldstar_settings.RELAY_DELAY))
    return _insert_intents(using, wakes, reason, _now() + delay)


def wake_now(
    execution_id: str, workflow_id: str, *, reason: str = "wake", using: str = "default"
) -> int:
    """Wake an execution when the current transaction commits (at once in autocommit mode).

    The intent is written in the current transaction, so a rollback wakes nobody and a
    crash after the commit leaves it to the relay. Returns the intent id.
    """
    with transaction.atomic(using=using):
        pending = write_intents([Wake(execution_id, workflow_id)], reason=reason, using=using)
    deliver_on_commit(pending, using=using)
    return pending[0].intent_id


def schedule_wake(
    execution_id: str,
    workflow_id: str,
    at: datetime,
    *,
    reason: str = "timer",
    using: str = "default",
) -> int:
    """A durable timer: wake an execution at ``at`` (an aware datetime).

    Written in the current transaction and delivered by the relay once due (within about
    ``RELAY_INTERVAL`` of ``at``). Returns the intent id.
    """
    if timezone.is_naive(at):
        raise ValueError("schedule_wake needs an aware datetime")
    wake = Wake(execution_id, workflow_id)
    return _insert_intents(using, [wake], reason, at, due_at=at)[0].intent_id


# --- the relay ------------------------------------------------------------------------


def _claim_due(using: str, limit: int) -> list[PendingWake]:
    lock = " FOR UPDATE SKIP LOCKED" if _is_postgres(using) else ""
    with connections[using].cursor() as cursor:
        cursor.execute(
            f"SELECT id, execution_id, workflow_id FROM {INTENT_TABLE} "
            "WHERE delivered_at IS NULL AND available_at <= %s "
            f"ORDER BY available_at, id LIMIT %s{lock}",
            [_adapt(using, _now()), limit],
        )
        return [PendingWake(int(i), Wake(e, w)) for i, e, w in cursor.fetchall()]


def relay_once(*, using: str = "default", batch_size: int = 100) -> int:
    """Deliver every due, unacknowledged wake intent; return how many were delivered.

    Each delivered intent's ``available_at`` moves back (see ``_redelivery_delay``), so it
    is delivered again only if no run acknowledged it meanwhile. On PostgreSQL each batch
    is claimed with ``FOR UPDATE SKIP LOCKED`` and held until it is pushed back, so several
    relays share the work without delivering a batch twice. On SQLite
    the batch is read and delivered outside a transaction (holding SQLite's write lock
    during a broker call would stall every writer); two relays may then deliver an intent
    twice, which is a spurious wake. A batch the backend refuses is recorded as failed,
    pushed back, and retried later.
    """
    delivered = 0
    postgres = _is_postgres(using)
    while True:
        with transaction.atomic(using=using) if postgres else nullcontext():
            batch = _claim_due(using, batch_size)
            ok = bool(batch) and _deliver_batch(batch, using)
        if ok:
            delivered += len(batch)
        if len(batch) < batch_size:
            return delivered


def _deliver_batch(batch: Sequence[PendingWake], using: str) -> bool:
    ids = [p.intent_id for p in batch]
    try:
        yieldstar_settings.wake_backend(_coalesce(p.wake for p in batch))
    except Exception as exc:
        logger.warning("relay: wake backend failed for %d wake(s)", len(batch), exc_info=True)
        relay_log.counts.add(failed=len(batch))
        _record_failure(using, ids, exc)
        return False
    _push_back(using, ids)
    logger.debug("relay: delivered %d wake(s)", len(batch))
    return True


def run_relay(
    *,
    using: str = "default",
    interval: float | None = None,
    stop: threading.Event | None = None,
    once: bool = False,
    on_error: Callable[[BaseException], None] | None = None,
) -> int:
    """Run ``relay_once`` every ``interval`` seconds (``RELAY_INTERVAL``) until ``stop`` is
    set; return the number of intents delivered. Logs its database and Celery app at the
    start and the counts once a minute (:mod:`~yieldstar_django.relay_log`).

    A database error in one round is logged (and passed to ``on_error``), the connection
    closed, and the loop goes on; the next round reconnects.
    """
    stop = stop or threading.Event()
    total = 0
    relay_log.log_startup(using)
    relay_log.counts.using = using
    while True:
        try:
            delivered = relay_once(using=using)
            total += delivered
            relay_log.counts.add(delivered=delivered)
            relay_log.counts.maybe_report()
            _expire_claim_leases(using)
        except Exception as exc:
            logger.exception("relay round failed")
            if on_error is not None:
                on_error(exc)
            connections[using].close()
        if once:
            return total
        wait = yieldstar_settings.RELAY_INTERVAL if interval is None else interval
        if stop.wait(wait):
            return total


def _expire_claim_leases(using: str) -> None:
    """Hand back expired leased claims (``step.take(..., lease=)``) in each relay round
    on the database that holds them (a relay of another database leaves them alone)."""
    from django.db import router

    from .models.claim_leases import ClaimLeaseRecord
    from .runtime.claim_leases import expire_due

    if router.db_for_write(ClaimLeaseRecord) == using:
        expire_due()


def stop_on_signals(stop: threading.Event) -> None:
    """Set ``stop`` on SIGINT and SIGTERM (in the main thread)."""

    def handler(signum: int, frame: FrameType | None) -> None:
        logger.info("relay: received signal %d, stopping", signum)
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


@shared_task(name="yieldstar_django.relay_wakes", ignore_result=True)
def relay_wakes(using: str = "default") -> int:
    """Celery beat task: one relay round (schedule it every ``RELAY_INTERVAL`` or so).

    Closes stale database connections before and after, as Django does around a request.
    """
    close_old_connections()
    try:
        delivered = relay_once(using=using)
        _expire_claim_leases(using)
        return delivered
    finally:
        close_old_connections()


def prune_delivered(*, older_than: float, using: str = "default") -> int:
    """Delete intents acknowledged more than ``older_than`` seconds ago; return how many."""
    cutoff = _adapt(using, _now() - timedelta(seconds=older_than))
    with connections[using].cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {INTENT_TABLE} WHERE delivered_at IS NOT NULL AND delivered_at < %s",
            [cutoff],
        )
        return int(cursor.rowcount)
