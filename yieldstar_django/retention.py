"""Retention: delete finished executions, with their heaps, wake intents, waiters, claim
leases and ledger rows, once they are older than ``RETENTION_SECONDS``; and delivered wake
intents as old. An execution with a leased claim still held is kept until the lease ends
(its hand-back records a ledger row under the execution's id).

The ledger rule: a ledger row (``AppliedStep``) is deleted only in the same transaction as
the execution whose id it carries, and only while that execution is finished (the delete
re-checks the status under the row lock). Only that execution can replay its ledger rows, and
a finished execution never runs again, so no replay can miss a row. Ledger rows of an id
that names no execution (a store client called with a step id of its own) are never pruned.

Work goes in batches of ``batch_size`` executions, each its own short transaction; on
PostgreSQL a batch skips the executions another transaction has locked.

Idle stores (:func:`prune_idle_stores`): the stores of a definition with a ``retention``
untouched (no commit) for that long, with no waiter and no held claim lease, are deleted,
in batches too. A batch first locks its candidates (``FOR UPDATE SKIP LOCKED`` on
PostgreSQL: a store being written or waited on right now is skipped), then deletes those
that still qualify in a later statement, which sees every commit, waiter registration
and leased take that got the store's row lock before the batch did; those that come after
find the store deleted (a write creates it anew, a registration wakes its execution at
once). On SQLite the batch's transaction holds the write lock. The applied-steps ledger is
kept, as for any deletion.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connections, transaction
from django.utils import timezone

from .conf import MAX_SECONDS, database_alias, is_duration
from .core.definition import registered_definitions
from .models.claim_leases import ClaimLeaseState
from .models.runtime import TERMINAL_STATUSES
from .sql import queries
from .sql.queries import placeholders
from .wakes.outbox import MAX_BATCH_SIZE, delete_delivered, is_batch_size

__all__ = ["MAX_BATCH_SIZE", "PruneCounts", "prune_finished", "prune_idle_stores"]


@dataclass
class PruneCounts:
    """Rows deleted, per kind."""

    executions: int = 0
    heap_entries: int = 0
    ledger_rows: int = 0
    intents: int = 0
    waiters: int = 0
    claim_leases: int = 0
    batches: int = field(default=0, compare=False)


def _prune_batch(using: str, cutoff: Any, batch_size: int, counts: PruneCounts) -> int:
    """Delete one batch of finished executions and what hangs off them; return how many."""
    connection = connections[using]
    statuses = sorted(TERMINAL_STATUSES)
    with transaction.atomic(using=using), connection.cursor() as cursor:
        # An execution whose leased claim is still held waits until the lease ends: its
        # hand-back writes a ledger row under the execution's id, deleted only with it.
        cursor.execute(
            queries.of(connection).finished_executions,
            [*statuses, cutoff, ClaimLeaseState.HELD.value, batch_size],
        )
        ids = [row[0] for row in cursor.fetchall()]
        if not ids:
            return 0
        of = placeholders(len(ids))
        cursor.execute(queries.of().prune_steps.format(ids=of), ids)
        counts.heap_entries += cursor.rowcount
        cursor.execute(queries.of().prune_runs.format(ids=of), ids)
        cursor.execute(queries.of().prune_ledger_rows.format(ids=of), ids)
        counts.ledger_rows += cursor.rowcount
        cursor.execute(queries.of().prune_intents.format(ids=of), ids)
        counts.intents += cursor.rowcount
        cursor.execute(queries.of().prune_waiter_paths.format(ids=of), ids)
        cursor.execute(queries.of().prune_waiters.format(ids=of), ids)
        counts.waiters += cursor.rowcount
        cursor.execute(queries.of().prune_claim_leases.format(ids=of), ids)
        counts.claim_leases += cursor.rowcount
        # A finished execution waits for nothing: its wait rows went at its end (a
        # cancel's, or the wait step's); any left would hold its row.
        cursor.execute(queries.of().prune_child_waits.format(ids=of), ids)
        # Re-checks the status: the selected rows are locked (PostgreSQL) or the write lock
        # is held (SQLite), so a row deleted here is finished now, with its ledger.
        cursor.execute(queries.of().prune_executions.format(ids=of), [*ids, *statuses])
        deleted = int(cursor.rowcount)
        if deleted != len(ids):  # pragma: no cover - terminal statuses never change
            raise RuntimeError("an execution left a terminal status during pruning")
        counts.executions += deleted
        return deleted


def prune_finished(
    *,
    older_than: float,
    batch_size: int = 500,
    using: str | None = None,
    delivered_intents: bool = True,
) -> PruneCounts:
    """Delete executions finished more than ``older_than`` seconds ago, with their heap
    entries, ledger rows, wake intents and waiters, and (with ``delivered_intents``) wake
    intents delivered as long ago, ``batch_size`` rows per transaction. Never deletes an
    unfinished execution's rows."""
    using = database_alias(using)
    cutoff = _cutoff(using, older_than, batch_size)
    counts = PruneCounts()
    while _prune_batch(using, cutoff, batch_size, counts) == batch_size:
        counts.batches += 1
    counts.batches += 1
    if delivered_intents:
        _prune_delivered(using, cutoff, batch_size, counts)
    return counts


def _cutoff(using: str, older_than: float, batch_size: int) -> Any:
    """The database's value of the time ``older_than`` seconds ago, once the arguments are
    checked (``ValueError``)."""
    if not is_duration(older_than, 0) or not is_batch_size(batch_size):
        raise ValueError(
            f"older_than must be >= 0 and <= {MAX_SECONDS}, "
            f"and batch_size from 1 to {MAX_BATCH_SIZE}"
        )
    return connections[using].ops.adapt_datetimefield_value(
        timezone.now() - timedelta(seconds=older_than)
    )


def _prune_delivered(using: str, cutoff: Any, batch_size: int, counts: PruneCounts) -> None:
    while (deleted := delete_delivered(cutoff, batch_size, using=using)) > 0:
        counts.intents += deleted
        counts.batches += 1
        if deleted < batch_size:
            break


def prune_idle_stores(
    *, batch_size: int = 500, using: str | None = None, now: datetime | None = None
) -> dict[str, int]:
    """Delete the stores of every registered definition with a ``retention`` that were
    not changed for that long before ``now`` (by default the present) and have no waiter
    and no held claim lease, ``batch_size`` stores per transaction; returns how many per
    definition name. The delivery counts of deleted instances go too. Race-free against
    commits, registrations and leased takes of the same stores (see the module doc)."""
    using = database_alias(using)
    if not is_batch_size(batch_size):
        raise ValueError(f"batch_size must be from 1 to {MAX_BATCH_SIZE}")
    now = now or timezone.now()
    connection = connections[using]
    deleted: dict[str, int] = {}
    for definition in registered_definitions():
        if definition.retention is None:
            continue
        cutoff = connection.ops.adapt_datetimefield_value(now - definition.retention)
        after: str | None = ""
        count = 0
        while after is not None:
            n, after = _idle_batch(using, definition.name, cutoff, after, batch_size)
            count += n
        deleted[definition.name] = count
    if any(deleted.values()):
        with transaction.atomic(using=using), connection.cursor() as cursor:
            cursor.execute(queries.of().prune_claim_deliveries_of_deleted_stores)
    return deleted


def _idle_batch(
    using: str, name: str, cutoff: Any, after: str, batch_size: int
) -> tuple[int, str | None]:
    """Delete one batch of the idle stores of ``name`` after store id ``after``; return
    how many, and the store id to go on after (``None``: the last batch)."""
    connection = connections[using]
    held = ClaimLeaseState.HELD.value
    with transaction.atomic(using=using), connection.cursor() as cursor:
        cursor.execute(queries.of(connection).idle_stores, [name, after, cutoff, held, batch_size])
        rows = cursor.fetchall()
        if not rows:
            return 0, None
        ids = [row[0] for row in rows]
        cursor.execute(
            queries.of().delete_idle_stores.format(ids=placeholders(len(ids))),
            [*ids, cutoff, held],
        )
        deleted = int(cursor.rowcount)
    return deleted, (rows[-1][1] if len(rows) == batch_size else None)
