"""Waiter registration, removal and listing on the database, linearizable with commits."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from ..core.keys import check_removal, check_store, check_waiter
from ..core.results import StoreWaiter, Wake
from ..core.waiter_index import waiter_path_rows
from ..sql import queries
from ..sql.queries import placeholders
from ..wakes.outbox import PendingWake, write_intents
from .arguments import paths_json
from .portable import delete_waiters, now

__all__ = [
    "LeaseFence",
    "LeaseNotHeld",
    "Registered",
    "Registration",
    "checked_paths",
    "list_waiters",
    "register_waiter",
    "remove_waiters",
]

#: Path rows per multi-row insert.
PATH_ROWS_PER_INSERT = 500


@dataclass(frozen=True)
class LeaseFence:
    """A run's hold on the lease of its execution, which a registration of one of its
    waiters checks in its own transaction, before it writes anything: the execution's row
    (by the waiter's execution id) leased to ``owner`` and in none of the ``finished``
    statuses, read under a share lock (``FOR SHARE`` on PostgreSQL, which conflicts with
    the ``UPDATE`` that takes a lease over, releases it or cancels the execution; SQLite's
    ``BEGIN IMMEDIATE`` serializes all writers). The runtime's heap writes are fenced by
    the same condition (``yieldstar_django.runtime.leases.Lease.owned``)."""

    owner: str
    finished: tuple[str, ...] = ()


class LeaseNotHeld(Exception):
    """A fenced registration found its run's lease gone (taken over, released, or the
    execution finished, cancelled or deleted): nothing was registered, no wake written."""


@dataclass(frozen=True)
class Registered:
    """What a registration did: ``registered`` is false when it was made ``unless_stale``
    and the store had moved since the observation (nothing written); ``pending``: the
    wake intents it wrote, to deliver on commit."""

    registered: bool
    pending: list[PendingWake]


#: A registration's answer; ``None``: the run of its fence does not hold its lease.
Registration = Registered | None


def register_waiter(
    connection: BaseDatabaseWrapper,
    using: str,
    waiter: StoreWaiter,
    fence: LeaseFence | None = None,
    unless_stale: bool = False,
) -> Registration:
    """Register ``waiter``, linearizably with every mutation of its store; return the wake
    intents written (the waiter is stale, or its store missing), to deliver on commit;
    ``None`` when the run of ``fence`` does not hold its lease (nothing is written). With
    ``unless_stale``, a stale observation registers nothing and writes no intent
    (``registered`` false): the caller, whose run holds the lease, takes again at once.

    In one transaction: read the store row under a share lock (``FOR SHARE`` on
    PostgreSQL, which conflicts with the ``FOR NO KEY UPDATE`` a commit takes; SQLite's
    ``BEGIN IMMEDIATE`` serializes all writers); with a ``fence``, first read the
    execution's row under a share lock and stop, writing nothing, unless the lease is the
    run's (:class:`LeaseFence`; the execution's row is locked before the store's, the order
    of a transaction that cancels an execution and then writes a store it waits on); compare
    the store's (instance_id, version)
    with the waiter's, upsert the waiter and its path rows, and, if the observation is
    stale, write a wake intent in the same transaction. A mutation therefore either
    committed before the lock was granted (the version moved: the waiter is woken at
    once) or takes the row lock after this transaction committed, and its waiter
    lookup, a later statement at READ COMMITTED, sees the new waiter. A missing store
    wakes the waiter at once and registers nothing. Likewise with a ``fence``, a lease
    takeover (or release, or cancel) either committed before the execution's row lock was
    granted (nothing is registered) or waits for this transaction, and what it does next
    (the successor reads the execution's waiters, a cancel removes them) sees the waiter.

    Registering again for the same (execution, step, store) replaces the observation. A
    waiter is woken once per registration: a stale one is registered woken (``woken_at``),
    a current one is marked by the commit that wakes it.

    Inside a caller's ``transaction.atomic()`` it joins that transaction without a
    savepoint (two round trips fewer): the registration commits or rolls back with the
    caller's work, and a database error here dooms the caller's transaction (Django's
    ``savepoint=False``). Arguments are checked before the first statement, so a
    rejected waiter leaves the caller's transaction usable.
    """
    w = waiter
    read_paths = checked_paths(w)
    wake = Wake(w.execution_id, w.workflow_id)
    with transaction.atomic(using=using, savepoint=False), connection.cursor() as cursor:
        if fence is not None and not _lease_held(cursor, connection, w.execution_id, fence):
            return None
        cursor.execute(queries.of(connection).read_store_for_waiter, [w.store_name, w.store_id])
        row = cursor.fetchone()
        if row is None:
            return Registered(True, write_intents([wake], reason="missing", using=using))
        store_pk, instance_id, version = int(row[0]), row[1], int(row[2])
        same_instance = instance_id == w.instance_id
        stale = not same_instance or version != w.since_version
        if stale and unless_stale:
            return Registered(False, [])
        registered = now(connection)
        cursor.execute(
            queries.of(connection).upsert_waiter,
            [
                w.workflow_id,
                w.execution_id,
                w.step_key,
                store_pk,
                w.instance_id,
                w.since_version,
                paths_json(read_paths),
                registered,
                registered if stale else None,  # woken now, by its registration
                w.cohort,
            ],
        )
        fetched = cursor.fetchone()
        assert fetched is not None
        waiter_pk = int(fetched[0])
        cursor.execute(queries.of(connection).delete_waiter_paths, [waiter_pk])
        rows = waiter_path_rows(read_paths, same_instance=same_instance)
        for start in range(0, len(rows), PATH_ROWS_PER_INSERT):
            chunk = rows[start : start + PATH_ROWS_PER_INSERT]
            cursor.execute(
                queries.of(connection).insert_waiter_paths.format(rows=_rows(len(chunk))),
                [v for kind, key in chunk for v in (waiter_pk, store_pk, kind, key)],
            )
        return Registered(True, write_intents([wake], reason="stale", using=using) if stale else [])


def _lease_held(
    cursor: Any, connection: BaseDatabaseWrapper, execution_id: str, fence: LeaseFence
) -> bool:
    """Whether the execution is leased to ``fence.owner`` and not finished, its row
    share-locked until the transaction ends (PostgreSQL)."""
    if fence.finished:
        statuses = placeholders(len(fence.finished))
        statement = queries.of(connection).lease_held_unfinished.format(statuses=statuses)
    else:
        statement = queries.of(connection).lease_held
    cursor.execute(statement, [execution_id, fence.owner, *fence.finished])
    return cursor.fetchone() is not None


@functools.cache
def _rows(count: int) -> str:
    """``insert_waiter_paths``'s ``rows`` of ``count`` path rows."""
    return ", ".join(["(%s, %s, %s, %s)"] * count)


def checked_paths(w: StoreWaiter) -> list[tuple[Any, ...]]:
    """Check a waiter's identifying texts and its ``since_version`` (``StoreKeyError``
    before any statement); return its read paths as tuples."""
    check_waiter(w)
    return [tuple(p) for p in w.read_paths]


def remove_waiters(
    connection: BaseDatabaseWrapper, using: str, execution_id: str, step_key: str | None
) -> list[PendingWake]:
    """Delete the waiters (and their path rows) of an execution, or of one of its steps;
    return the wake intents written for the waiters woken in their place (a removed woken
    waiter of a cohort hands its wake on: :func:`.portable.delete_waiters`), to deliver on
    commit.

    Joins a caller's ``transaction.atomic()`` without a savepoint, as ``register_waiter``
    does."""
    check_removal(execution_id, step_key)
    keys = None if step_key is None else [step_key]
    with transaction.atomic(using=using, savepoint=False), connection.cursor() as cursor:
        handed = delete_waiters(cursor, connection, execution_id, keys)
        return write_intents(handed, reason="cohort", using=using) if handed else []


def list_waiters(connection: BaseDatabaseWrapper, name: str, id: str) -> list[StoreWaiter]:
    """The waiters registered on a store, in registration order."""
    check_store(name, id)
    with connection.cursor() as cursor:
        cursor.execute(queries.of(connection).list_waiters, [name, id])
        return [
            StoreWaiter(
                wf,
                ex,
                key,
                name,
                id,
                inst,
                int(since),
                tuple(tuple(p) for p in json.loads(paths)),
                cohort,
            )
            for wf, ex, key, inst, since, paths, cohort in cursor.fetchall()
        ]
