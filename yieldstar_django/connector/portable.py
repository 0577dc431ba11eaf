"""The commit as separate statements, in one transaction: SQLite, and PostgreSQL when the
client is made with ``use_functions=False`` (the conformance suite runs both paths there).

The steps and their order are those of the PL/pgSQL functions
(``yieldstar_django/sql/yieldstar_commit_*_v2.sql``): the ledger first, the store row lock
and comparison (or the insertion of a missing store), the ledger row, the new state and
version row, history pruning, the matching waiters and their wake intents.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from ..conf import yieldstar_settings
from ..core.cohorts import cohort_wakes, first_of_each_cohort
from ..core.commits import (
    COMMITTED,
    MISSING,
    CommitOutcome,
    StoreDeletion,
    StoredState,
    StoreMutation,
    conflict,
    recorded_outcome,
)
from ..core.results import LedgerOperation, StoreStepId, Wake
from ..core.types import StorePath
from ..core.waiter_index import path_match
from ..sql import queries
from ..sql.queries import placeholders
from ..wakes.outbox import PendingWake, write_intents
from .arguments import paths_json
from .statements import matching_waiters_statements

__all__ = [
    "commit_deletion",
    "commit_mutation",
    "compare_and_lock",
    "insert_store_row",
    "insert_version",
    "ledger_result",
    "now",
    "read_locked",
]

Committed = tuple[CommitOutcome, list[PendingWake]]

#: Waiter ids per statement when marking waiters woken.
WAKES_PER_STATEMENT = 500


class _StepRecordedMeanwhile(Exception):
    """Rolls back a commit whose step was recorded by a concurrent commit."""


def now(connection: BaseDatabaseWrapper) -> Any:
    """The current time, adapted for ``connection``."""
    return connection.ops.adapt_datetimefield_value(timezone.now())


def ledger_result(
    cursor: Any, name: str, id: str, step_id: StoreStepId, operation: LedgerOperation
) -> CommitOutcome | None:
    """The outcome for an ``operation`` whose ``step_id`` is recorded on the store:
    ``already-applied``, or ``step-mismatch`` if another kind of operation recorded it;
    ``None`` if the step is not recorded."""
    cursor.execute(queries.of().ledger_lookup, [name, id, step_id.execution_id, step_id.step_key])
    row = cursor.fetchone()
    return None if row is None else recorded_outcome(str(row[0]), row[1], operation)


def insert_store_row(
    cursor: Any, connection: BaseDatabaseWrapper, name: str, id: str, stored: StoredState
) -> int | None:
    """Insert a store row; its pk, or ``None`` if the store exists."""
    at = now(connection)
    cursor.execute(
        queries.of(connection).insert_store,
        [name, id, stored.instance_id, stored.version, stored.encoded, at, at],
    )
    row = cursor.fetchone()
    return None if row is None else int(row[0])


def read_locked(cursor: Any, statement: str, name: str, id: str) -> tuple[int, StoredState] | None:
    """The store row and its pk, read by ``statement``: ``read_store_row`` or one of its
    locking variants (``read_store_row_for_commit``, ``read_store_row_for_delete``)."""
    cursor.execute(statement, [name, id])
    row = cursor.fetchone()
    if row is None:
        return None
    return int(row[0]), StoredState(row[1], int(row[2]), row[3])


def compare_and_lock(
    cursor: Any, connection: BaseDatabaseWrapper, name: str, id: str, expected: StoredState
) -> tuple[int, StoredState] | None:
    """The store row, locked if it is at ``expected`` (compare the returned row).

    On PostgreSQL the row is compared without a lock first, so the loser of a race learns
    of it without locking the row (a row lock writes WAL: its commit would wait for a flush
    while every other writer of the store queues on the lock)."""
    if connection.vendor == "postgresql":
        cursor.execute(queries.of(connection).peek_store_version, [name, id])
        row = cursor.fetchone()
        if row is None:
            return None
        if (row[1], int(row[2])) != (expected.instance_id, expected.version):
            return read_locked(cursor, queries.of(connection).read_store_row, name, id)
    return read_locked(cursor, queries.of(connection).read_store_row_for_commit, name, id)


def insert_version(
    cursor: Any,
    connection: BaseDatabaseWrapper,
    name: str,
    id: str,
    instance_id: str,
    version: int,
    paths: str,
    step_id: StoreStepId | None,
    encoded: str,
) -> None:
    """The version row of a commit (its state only if ``VERSION_HISTORY_KEEP_STATE``)."""
    keep = yieldstar_settings.VERSION_HISTORY_KEEP_STATE
    cursor.execute(
        queries.of(connection).insert_version,
        [
            name,
            id,
            instance_id,
            version,
            paths,
            step_id.execution_id if step_id else None,
            step_id.step_key if step_id else None,
            encoded if keep else None,
            now(connection),
        ],
    )


def _record_step(
    cursor: Any,
    connection: BaseDatabaseWrapper,
    name: str,
    id: str,
    step_id: StoreStepId,
    result: str | None,
    operation: LedgerOperation,
) -> bool:
    """Insert the ledger row; False if the step is recorded already."""
    assert result is not None, "a step id needs a result to record"
    cursor.execute(
        queries.of(connection).record_step,
        [name, id, step_id.execution_id, step_id.step_key, result, operation, now(connection)],
    )
    return cursor.fetchone() is not None


def _prune_versions(cursor: Any, instance_id: str, version: int) -> None:
    limit = yieldstar_settings.VERSION_HISTORY_LIMIT
    if limit is not None and version >= limit:
        cursor.execute(queries.of().prune_version, [instance_id, version - limit])


def lock_waiters(
    cursor: Any, connection: BaseDatabaseWrapper, execution_id: str, step_keys: Sequence[str]
) -> None:
    """Lock the waiters of those steps of an execution (PostgreSQL; SQLite's IMMEDIATE
    transactions hold the write lock already), in registration order: a claim of a step
    waiting on several stores does so before it locks its store's row."""
    if connection.vendor == "postgresql":
        keys = placeholders(len(step_keys))
        cursor.execute(
            queries.of(connection).lock_step_waiters.format(keys=keys), [execution_id, *step_keys]
        )


def delete_waiters(
    cursor: Any, connection: BaseDatabaseWrapper, execution_id: str, step_keys: Sequence[str] | None
) -> list[Wake]:
    """Delete the waiters (and their path rows) of an execution, or of those of its steps
    whose keys are ``step_keys``; return the wakes of the waiters woken in place of the
    removed ones (:mod:`yieldstar_django.core.cohorts`: a woken waiter of a cohort that goes
    without its step recorded hands its wake to the next of its cohort, marked woken)."""
    if step_keys is None:
        params = [execution_id]
        cursor.execute(queries.of().handed_off_execution_waiters, params)
        handed = cursor.fetchall()
        cursor.execute(queries.of().delete_execution_waiter_paths, params)
        cursor.execute(queries.of().delete_execution_waiters, params)
    else:
        keys, params = placeholders(len(step_keys)), [execution_id, *step_keys]
        cursor.execute(queries.of().handed_off_step_waiters.format(keys=keys), params)
        handed = cursor.fetchall()
        cursor.execute(queries.of().delete_step_waiter_paths.format(keys=keys), params)
        cursor.execute(queries.of().delete_step_waiters.format(keys=keys), params)
    wakes: list[Wake] = []
    for store_pk, cohort in dict.fromkeys((int(pk), c) for pk, c in handed):
        wakes += _next_of_cohorts(cursor, connection, store_pk, [cohort])
    return list(dict.fromkeys(wakes))


#: How many waiters of a cohort a hand-off tries to mark, the first not held elsewhere.
HAND_OFF_TRIES = 8


def _marker(cursor: Any, connection: BaseDatabaseWrapper) -> Any:
    """``mark(waiter)`` for :func:`~yieldstar_django.core.cohorts.cohort_wakes`: mark one
    ``(pk, wake)`` woken unless another transaction holds its row (PostgreSQL)."""

    def mark(member: tuple[int, Wake]) -> bool:
        cursor.execute(
            queries.of(connection).mark_woken.format(ids="%s"), [now(connection), member[0]]
        )
        return bool(cursor.rowcount)

    return mark


_Matched = tuple[int, Wake, bool, "str | None"]


def _matching(cursor: Any, store_pk: int, changed_paths: Sequence[StorePath]) -> list[_Matched]:
    """The waiters the changed paths intersect, in registration order: (id, the wake of
    its execution, whether it was woken since it registered, its cohort). A change of many
    paths is looked up in several statements (``PROBES_PER_STATEMENT`` index probes each)."""
    found: dict[int, _Matched] = {}
    for query, params in matching_waiters_statements(store_pk, path_match(changed_paths)):
        cursor.execute(query, params)
        for pk, e, w, woken, cohort in cursor.fetchall():
            found.setdefault(int(pk), (int(pk), Wake(e, w), woken is not None, cohort))
    return [found[pk] for pk in sorted(found)]


def _executions(waiters: Sequence[_Matched]) -> list[Wake]:
    """One wake per execution of ``waiters``, in the order of its first waiter."""
    return list(dict.fromkeys(waiter[1] for waiter in waiters))


def _waking(
    cursor: Any,
    connection: BaseDatabaseWrapper,
    store_pk: int,
    changed_paths: Sequence[StorePath],
    matched: Sequence[str] = (),
) -> list[Wake]:
    """The executions with a waiter the changed paths intersect that was not woken since
    it registered, in registration order, of each cohort only the first (as
    ``yieldstar_wake_waiters_v2`` does on PostgreSQL): those waiters are marked woken, rows
    locked elsewhere skipped (and of a cohort, the next one tried). Of each cohort in
    ``matched`` (the commit records a match of the waiter that checked for it), the first
    unwoken waiter, touched or not."""
    unwoken = [w for w in _matching(cursor, store_pk, changed_paths) if not w[2]]
    unwoken = [w for w in unwoken if w[3] is None or w[3] not in matched]
    alone, cohorts = first_of_each_cohort(unwoken, lambda waiter: waiter[3])
    for start in range(0, len(alone), WAKES_PER_STATEMENT):
        ids = [waiter[0] for waiter in alone[start : start + WAKES_PER_STATEMENT]]
        cursor.execute(
            queries.of(connection).mark_woken.format(ids=placeholders(len(ids))),
            [now(connection), *ids],
        )
    mark = _marker(cursor, connection)
    woken = alone + [w for members in cohorts.values() for w in cohort_wakes(members, mark)]
    return _executions(sorted(woken)) + _next_of_cohorts(cursor, connection, store_pk, matched)


def _next_of_cohorts(
    cursor: Any, connection: BaseDatabaseWrapper, store_pk: int, cohorts: Sequence[str]
) -> list[Wake]:
    """Wake the first unwoken waiter of each of ``cohorts`` on the store (marked; one held
    by another transaction is woken unmarked and the next tried)."""
    wakes: list[Wake] = []
    mark = _marker(cursor, connection)
    for cohort in dict.fromkeys(cohorts):
        cursor.execute(queries.of().next_of_cohort, [store_pk, cohort, HAND_OFF_TRIES])
        members = [(int(pk), Wake(e, w)) for pk, e, w in cursor.fetchall()]
        wakes += [wake for _, wake in cohort_wakes(members, mark)]
    return wakes


def commit_mutation(
    connection: BaseDatabaseWrapper, using: str, m: StoreMutation, unwait: Sequence[str] = ()
) -> Committed:
    """Commit ``m`` as separate statements in one transaction (joining an enclosing one),
    removing the waiters of the ``unwait`` step keys of its step's execution."""
    name, id, expected = m.definition.name, m.id, m.expected
    version = expected.version + 1
    recorded: CommitOutcome | None = None
    try:
        with transaction.atomic(using=using), connection.cursor() as cursor:
            if m.step_id is not None:
                recorded = ledger_result(cursor, name, id, m.step_id, m.operation)
                if recorded is not None:
                    return recorded, []
            if len(unwait) > 1:  # before the store's row, as yieldstar_commit_mutation_v4
                assert m.step_id is not None, "unwait names steps of the mutation's execution"
                lock_waiters(cursor, connection, m.step_id.execution_id, unwait)
            if m.created:
                pk = insert_store_row(
                    cursor,
                    connection,
                    name,
                    id,
                    StoredState(expected.instance_id, version, m.encoded_state),
                )
                if pk is None:
                    current = read_locked(
                        cursor, queries.of(connection).read_store_row_for_commit, name, id
                    )
                    return (MISSING if current is None else conflict(current[1])), []
            else:
                found = compare_and_lock(cursor, connection, name, id, expected)
                if found is None:
                    return MISSING, []
                pk, current_state = found
                if (current_state.instance_id, current_state.version) != (
                    expected.instance_id,
                    expected.version,
                ):
                    return conflict(current_state), []
            if m.step_id is not None and not _record_step(
                cursor, connection, name, id, m.step_id, m.encoded_result, m.operation
            ):
                recorded = ledger_result(cursor, name, id, m.step_id, m.operation)
                raise _StepRecordedMeanwhile
            versions = [(version, paths_json(m.changed_paths), m.step_id, m.encoded_state)]
            if m.created:  # version 0, the initial state, then the change
                versions.insert(0, (0, "[]", None, expected.encoded))
            else:
                cursor.execute(
                    queries.of().update_store, [version, m.encoded_state, now(connection), pk]
                )
            for number, paths, step_id, state in versions:
                insert_version(
                    cursor, connection, name, id, expected.instance_id, number, paths, step_id,
                    state,
                )  # fmt: skip
            _prune_versions(cursor, expected.instance_id, version)
            matched: list[str] = []
            if m.step_id is not None:  # its waiter checked for its cohort and matched
                step: list[Any] = [m.step_id.execution_id, m.step_id.step_key, pk]
                cursor.execute(queries.of().woken_cohort_of_step, step)
                matched = [cohort for (cohort,) in cursor.fetchall()]
            handed: list[Wake] = []
            if unwait:
                assert m.step_id is not None, "unwait names steps of the mutation's execution"
                handed = delete_waiters(cursor, connection, m.step_id.execution_id, unwait)
            waking = _waking(cursor, connection, pk, m.changed_paths, matched)
            wakes = list(dict.fromkeys(handed + waking))
            return COMMITTED, write_intents(wakes, reason="store", using=using)
    except _StepRecordedMeanwhile:
        assert recorded is not None
        return recorded, []


def commit_deletion(connection: BaseDatabaseWrapper, using: str, d: StoreDeletion) -> Committed:
    """Delete a store (if at ``expected``, when given) with its waiters, waking them all."""
    name, id, expected, step_id = d.definition.name, d.id, d.expected, d.step_id
    result, operation = d.encoded_result, d.operation
    with transaction.atomic(using=using), connection.cursor() as cursor:
        if step_id is not None:
            recorded = ledger_result(cursor, name, id, step_id, operation)
            if recorded is not None:
                return recorded, []
        found = read_locked(cursor, queries.of(connection).read_store_row_for_delete, name, id)
        if found is None:
            return MISSING, []
        pk, current = found
        if expected is not None and (current.instance_id, current.version) != (
            expected.instance_id,
            expected.version,
        ):
            return conflict(current), []
        if step_id is not None and not _record_step(
            cursor, connection, name, id, step_id, result, operation
        ):
            recorded = ledger_result(cursor, name, id, step_id, operation)
            assert recorded is not None
            return recorded, []
        wakes = _executions(_matching(cursor, pk, [()]))  # all waiters, woken or not
        cursor.execute(queries.of().delete_store_waiter_paths, [pk])
        cursor.execute(queries.of().delete_store_waiters, [pk])
        cursor.execute(queries.of().delete_store, [pk])
        return COMMITTED, write_intents(wakes, reason="delete", using=using)
