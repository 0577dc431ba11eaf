"""The outbox: wake intents written in the transaction that needs them, acknowledged by
progress, pushed back after each delivery, and pruned.

A wake asks for an execution to be resumed; it carries no copy of the event (the execution
re-reads the store when it runs). Every wake is first written as a ``WakeIntent`` row in
the transaction that requires it, so once that transaction is durable the wake is durable
too. An intent is *acknowledged* (``delivered_at`` set) when the wake took effect, not when
a broker accepted it: when a run of the execution starts (takes the lease, or runs again
under it) after the intent was due, or the execution finished (``acknowledge``; the runtime
acknowledges in the statement that takes the lease, with the same ``ack_condition``). A held lease's
takeover timer is the exception: a run under that lease leaves it pending (``keep``), so
``prune_delivered`` never deletes it while the lease is held. Until an intent is
acknowledged, the relay (:mod:`.relay`) delivers it again at its ``available_at``, which
its claim (``claim_due``) pushes back before it publishes, holding no lock while it does.

This module does not import the models, so it can be imported before the app registry is
ready; it writes the intents' table with the statements of ``sql/queries.sql``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from django.db import connections, transaction
from django.db.backends.utils import CursorWrapper
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from .. import clock
from ..conf import database_alias, yieldstar_settings
from ..core.results import Wake
from ..observability import metrics
from ..sql import queries
from ..sql.queries import placeholders

__all__ = [
    "MAX_BATCH_SIZE",
    "MAX_RETRY_DELAY",
    "TAKEOVER_REASON",
    "ClaimedWake",
    "PendingWake",
    "acknowledge",
    "claim_due",
    "count_overdue",
    "delete_delivered",
    "ensure_wake",
    "is_batch_size",
    "prune_delivered",
    "push_back",
    "record_claim_failure",
    "record_failure",
    "redelivery_delay",
    "require_batch_size",
    "schedule_wake",
    "write_intents",
]

#: Longest pause before the relay retries an intent whose delivery failed, in seconds.
MAX_RETRY_DELAY: Final = 300.0
#: The reason of a lease's takeover timer (``runtime.leases``): its wake is a ``takeover``.
TAKEOVER_REASON: Final = "lease"
#: Longest error text kept on an intent.
MAX_ERROR_LENGTH: Final = 2000
#: The largest batch of the relay and of pruning: a batch binds one query parameter per
#: row (an intent whose delivery is recorded, an execution pruned), well under the limits
#: of PostgreSQL (65,535) and SQLite (32,766 by default since 3.32).
MAX_BATCH_SIZE: Final = 10_000


@dataclass(frozen=True)
class PendingWake:
    """A written wake intent (``intent_id``) and the wake it stands for."""

    intent_id: int
    wake: Wake


@dataclass(frozen=True)
class ClaimedWake(PendingWake):
    """An intent claimed by the relay (``claim_due``), with the deliveries counted on it
    before this one (its ``attempts`` before the claim)."""

    deliveries: int


def _now() -> datetime:
    """When intents are due: the timers' clock (:mod:`yieldstar_django.clock`)."""
    return clock.now()


def _aware(value: datetime | str) -> datetime:
    """A timestamp column's value as an aware datetime (SQLite's is text)."""
    parsed = parse_datetime(value) if isinstance(value, str) else value
    if parsed is None:  # pragma: no cover - the column is never malformed
        raise ValueError(f"not a timestamp: {value!r}")
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _adapt(using: str, value: datetime) -> Any:
    return connections[using].ops.adapt_datetimefield_value(value)


def is_batch_size(value: object) -> bool:
    """Whether ``value`` is an ``int`` (not a ``bool``) from 1 to ``MAX_BATCH_SIZE``."""
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_BATCH_SIZE


def require_batch_size(value: object) -> None:
    """``ValueError`` unless ``value`` :func:`is_batch_size`."""
    if not is_batch_size(value):
        raise ValueError(f"batch_size must be an integer from 1 to {MAX_BATCH_SIZE}, not {value!r}")


def acknowledge(
    execution_id: str,
    *,
    everything: bool = False,
    keep: int | None = None,
    using: str | None = None,
) -> int:
    """Mark the execution's due intents done (all of them with ``everything``, for an
    execution that finished), but the intent ``keep`` (a held lease's takeover timer);
    return how many. Call it when a run starts, after the lease is held, or when the
    execution is finished: those intents took effect."""
    using = database_alias(using)
    now = _adapt(using, _now())
    if everything:
        params: list[Any] = [now, execution_id]
        sql = queries.of().acknowledge_all if keep is None else queries.of().acknowledge_all_but
    else:
        params = [now, execution_id, now]
        sql = queries.of().acknowledge_due if keep is None else queries.of().acknowledge_due_but
    if keep is not None:
        params.append(keep)
    with connections[using].cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)


def redelivery_delay(deliveries: int, *, failed: bool, takeover: bool = False) -> float:
    """Seconds before an intent delivered ``deliveries`` times before is delivered again:
    ``RELAY_DELAY`` (``RELAY_INTERVAL`` after a failed delivery, and for a lease's takeover
    timer) doubled per earlier delivery, at most ``MAX_RETRY_DELAY``.

    A takeover is delivered again sooner: the message may have gone to a consumer that
    cannot run it (a worker paused with SIGSTOP still holds what the broker pushed to it,
    on RabbitMQ as on Redis, until its connection drops), and the execution it rescues
    has been stuck for a whole lease already. A duplicate costs one spurious resume."""
    base = _retry_base(failed or takeover)
    return float(min(MAX_RETRY_DELAY, base * 2 ** min(deliveries, 20)))


def _retry_base(failed: bool) -> float:
    """``redelivery_delay`` of a first delivery, before the cap."""
    interval = float(yieldstar_settings.RELAY_INTERVAL)
    return interval if failed else max(float(yieldstar_settings.RELAY_DELAY), interval)


def push_back(using: str, intent_ids: Sequence[int], error: str | None = None) -> None:
    """Count a delivery on each intent and move its ``available_at`` to when the relay
    should deliver it again if it has not been acknowledged by then (and record
    ``error``, for a failed delivery). A read, then one statement per distinct delay."""
    if not intent_ids:
        return
    with connections[using].cursor() as cursor:
        cursor.execute(
            queries.of().intent_deliveries.format(ids=placeholders(len(intent_ids))),
            list(intent_ids),
        )
        deliveries = {int(i): int(attempts) for i, attempts in cursor.fetchall()}
        _reschedule(cursor, using, deliveries, count=True, error=error)


def record_failure(using: str, intent_ids: Sequence[int], error: BaseException) -> None:
    """Count a failed delivery on each intent and push its ``available_at`` back."""
    push_back(using, intent_ids, _error_text(error))


def record_claim_failure(using: str, claimed: Sequence[ClaimedWake], error: BaseException) -> None:
    """The backend refused intents the relay claimed (their delivery already counted by
    ``claim_due``): record ``error`` and move ``available_at`` to the retry after a failed
    delivery, on those not acknowledged meanwhile. One statement per distinct delay."""
    if claimed:
        deliveries = {c.intent_id: c.deliveries for c in claimed}
        with connections[using].cursor() as cursor:
            _reschedule(cursor, using, deliveries, count=False, error=_error_text(error))


def _error_text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:MAX_ERROR_LENGTH]


def _reschedule(
    cursor: CursorWrapper,
    using: str,
    deliveries: dict[int, int],
    *,
    count: bool,
    error: str | None,
    takeovers: frozenset[int] | set[int] = frozenset(),
) -> None:
    """Move each unacknowledged intent of ``deliveries`` (id: deliveries counted before)
    to ``redelivery_delay`` from now (a failed delivery's, with ``error``, recorded), and
    with ``count`` count one more delivery on it (without, ``error`` is required: a refused
    delivery). One UPDATE per distinct delay: a few at most, since the delay doubles up to
    ``MAX_RETRY_DELAY``."""
    if count:
        statement = queries.of().push_back if error is None else queries.of().push_back_failed
    else:
        assert error is not None, "an uncounted push back records a refusal"
        statement = queries.of().push_back_refused
    now = _now()
    by_delay: dict[float, list[int]] = {}
    for intent_id, before in deliveries.items():
        delay = redelivery_delay(before, failed=error is not None, takeover=intent_id in takeovers)
        by_delay.setdefault(delay, []).append(intent_id)
    for delay, ids in by_delay.items():
        at = _adapt(using, now + timedelta(seconds=delay))
        params: list[Any] = [at, *([error] if error is not None else []), *ids]
        cursor.execute(statement.format(ids=placeholders(len(ids))), params)


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
    connection = connections[using]
    with connection.cursor() as cursor:
        if len(wakes) > 1 and connection.vendor == "postgresql":
            # One statement for them all (a fan-out's children): ids ascend in their order.
            cursor.execute(
                queries.of(connection).insert_intents,
                [
                    reason,
                    at,
                    due,
                    now,
                    [wake.execution_id for wake in wakes],
                    [wake.workflow_id for wake in wakes],
                ],
            )
            ids = sorted(int(row[0]) for row in cursor.fetchall())
            assert len(ids) == len(wakes)
            return [PendingWake(id, wake) for id, wake in zip(ids, wakes, strict=True)]
        for wake in wakes:
            cursor.execute(
                queries.of().insert_intent,
                [wake.execution_id, wake.workflow_id, reason, at, due, now],
            )
            row = cursor.fetchone()
            assert row is not None
            pending.append(PendingWake(int(row[0]), wake))
    return pending


def write_intents(
    wakes: Sequence[Wake], *, reason: str, using: str | None = None
) -> list[PendingWake]:
    """Write immediate wake intents in the current transaction (``available_at`` = now +
    ``RELAY_DELAY``) and return them; the caller delivers them on commit."""
    using = database_alias(using)
    delay = timedelta(seconds=float(yieldstar_settings.RELAY_DELAY))
    return _insert_intents(using, wakes, reason, _now() + delay)


def schedule_wake(
    execution_id: str,
    workflow_id: str,
    at: datetime,
    *,
    reason: str = "timer",
    using: str | None = None,
) -> int:
    """A durable timer: wake an execution at ``at`` (an aware datetime).

    Written in the current transaction and delivered by the relay once due (within about
    ``RELAY_INTERVAL`` of ``at``). Returns the intent id.
    """
    using = database_alias(using)
    if timezone.is_naive(at):
        raise ValueError("schedule_wake needs an aware datetime")
    wake = Wake(execution_id, workflow_id)
    return _insert_intents(using, [wake], reason, at, due_at=at)[0].intent_id


def ensure_wake(
    execution_id: str,
    workflow_id: str,
    at: datetime,
    *,
    reason: str = "timer",
    using: str | None = None,
) -> int | None:
    """:func:`schedule_wake`, unless the execution already has an unacknowledged timer of
    that ``reason`` due at ``at``: then ``None`` is returned and that timer is made
    deliverable at ``at`` again if a delivery pushed it past (the relay's clock ran ahead
    of this one and delivered it early: the run it woke found it not due). One statement,
    in the current transaction; two when a timer is pending."""
    using = database_alias(using)
    if timezone.is_naive(at):
        raise ValueError("ensure_wake needs an aware datetime")
    due = _adapt(using, at)
    params = [execution_id, workflow_id, reason, due, due, _adapt(using, _now())]
    with connections[using].cursor() as cursor:
        cursor.execute(
            queries.of().insert_timer_unless_pending, [*params, execution_id, reason, due]
        )
        row = cursor.fetchone()
        if row is None:
            cursor.execute(queries.of().rearm_pending_timer, [due, execution_id, reason, due, due])
    return None if row is None else int(row[0])


def claim_due(using: str, limit: int) -> list[ClaimedWake]:
    """Claim up to ``limit`` due, unacknowledged intents, oldest first, for the relay to
    publish: count a delivery on each and push its ``available_at`` back by
    ``redelivery_delay`` (as an accepted delivery), in a transaction of its own (or the
    caller's) that holds no lock once this returns.

    A claimed intent is not claimed again before that time: several relays never deliver
    one batch together, and a relay that dies between its claim and its publish leaves
    the intents to be delivered then. On PostgreSQL one statement (``UPDATE ... FROM
    (SELECT ... FOR UPDATE SKIP LOCKED) RETURNING``): relays claim disjoint batches without
    waiting for each other. On SQLite a read and an UPDATE per distinct delay in one
    ``BEGIN IMMEDIATE`` transaction.
    """
    now = _now()
    connection = connections[using]
    if connection.vendor == "postgresql":
        at = _adapt(using, now)
        params = [
            at, limit, at, MAX_RETRY_DELAY, TAKEOVER_REASON, _retry_base(failed=True),
            _retry_base(failed=False), TAKEOVER_REASON,
        ]  # fmt: skip
        with connection.cursor() as cursor:
            cursor.execute(queries.of(connection).claim_due_intents, params)
            rows = sorted(cursor.fetchall(), key=lambda row: (row[4], row[0]))
        if rows and metrics.enabled():
            metrics.relay_lag((now - _aware(rows[0][4])).total_seconds())
        return [
            ClaimedWake(int(i), Wake(e, w, takeover=bool(t)), int(d)) for i, e, w, d, _, t in rows
        ]
    with transaction.atomic(using=using), connection.cursor() as cursor:
        cursor.execute(queries.of(connection).due_intents, [_adapt(using, now), limit])
        found = cursor.fetchall()
        claimed = [
            ClaimedWake(int(i), Wake(e, w, takeover=r == TAKEOVER_REASON), int(d))
            for i, e, w, d, r, _ in found
        ]
        if found and metrics.enabled():
            metrics.relay_lag((now - _aware(found[0][5])).total_seconds())
        deliveries = {c.intent_id: c.deliveries for c in claimed}
        takeovers = {c.intent_id for c in claimed if c.wake.takeover}
        _reschedule(cursor, using, deliveries, count=True, error=None, takeovers=takeovers)
    return claimed


def count_overdue(seconds: float, *, using: str | None = None) -> int:
    """Unacknowledged intents deliverable for more than ``seconds``."""
    with _run_with_cutoff(queries.of().count_overdue_intents, seconds, using) as cursor:
        row = cursor.fetchone()
        return int(row[0]) if row else 0


def prune_delivered(
    *, older_than: float, using: str | None = None, batch_size: int | None = None
) -> int:
    """Delete intents acknowledged more than ``older_than`` seconds ago; return how many.
    With ``batch_size`` (1 to ``MAX_BATCH_SIZE``, else ``ValueError``), at most that many
    per transaction (:func:`delete_delivered`)."""
    if batch_size is not None:
        require_batch_size(batch_size)
    if batch_size is None:
        with _run_with_cutoff(queries.of().delete_delivered_intents, older_than, using) as cursor:
            return int(cursor.rowcount)
    using = database_alias(using)
    cutoff = _adapt(using, _now() - timedelta(seconds=older_than))
    total = 0
    while (deleted := delete_delivered(cutoff, batch_size, using=using)) > 0:
        total += deleted
        if deleted < batch_size:
            break
    return total


def delete_delivered(cutoff: Any, limit: int, *, using: str) -> int:
    """In a transaction of its own (or the caller's), delete at most ``limit`` intents
    acknowledged before ``cutoff`` (a value of ``using``'s database); return how many."""
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        cursor.execute(queries.of().delete_delivered_intents_batch, [cutoff, limit])
        return int(cursor.rowcount)


@contextmanager
def _run_with_cutoff(sql: str, seconds: float, using: str | None) -> Iterator[CursorWrapper]:
    """A cursor of ``using``'s alias that has run ``sql``, its one ``%s`` the time
    ``seconds`` ago."""
    using = database_alias(using)
    cutoff = _adapt(using, _now() - timedelta(seconds=seconds))
    with connections[using].cursor() as cursor:
        cursor.execute(sql, [cutoff])
        yield cursor
