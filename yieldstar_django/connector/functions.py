"""The commit, and a waiter's registration, as one call of a PL/pgSQL function
(PostgreSQL): one round trip.

The function is ``yieldstar_django/sql/yieldstar_commit_mutation_v4.sql`` (deletions
too); its steps are those of :mod:`.portable`. With a ``publish`` (outside
``transaction.atomic``), the call runs in its own transaction and its wakes are published
while the database commits it (:mod:`.overlap`). The registration is
``yieldstar_register_waiter_v3.sql`` (fenced by a run's lease when given one), the
statements of :func:`.waiters.register_waiter`. Migration ``0014_waiter_cohorts`` creates
both versions (``0002_postgres`` the ones before, which the previous release calls).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

from django.db.backends.base.base import BaseDatabaseWrapper

from .. import clock
from ..conf import yieldstar_settings
from ..core.commits import (
    COMMITTED,
    MISSING,
    CommitOutcome,
    StoreDeletion,
    StoredState,
    StoreMutation,
    already_applied,
    conflict,
    step_mismatch,
)
from ..core.results import StoreWaiter, Wake
from ..core.waiter_index import path_match, waiter_path_rows
from ..sql import queries
from ..wakes.outbox import PendingWake
from . import overlap, waiters
from .arguments import paths_json
from .cursors import fetchone
from .portable import Committed, now

__all__ = ["Publish", "commit_deletion", "commit_mutation", "register_waiter"]

#: Publishes a commit's wakes while the database commits it, and returns what to
#: run once it is (:func:`yieldstar_django.wakes.publish_during_commit`, bound).
Publish: TypeAlias = Callable[[Sequence[PendingWake]], Callable[[], None]]


def commit_mutation(
    connection: BaseDatabaseWrapper,
    m: StoreMutation,
    unwait: Sequence[str] = (),
    publish: Publish | None = None,
) -> Committed:
    """Commit ``m`` with ``yieldstar_commit_mutation_v4``, removing the waiters of the
    ``unwait`` step keys of its step's execution. With ``publish``, its wakes are
    published during the commit and none is returned."""
    match = path_match(m.changed_paths)
    return _call(
        connection,
        m,
        m.expected,
        new_state=(
            m.created,
            # The initial state is read only when the commit creates the store: an update
            # does not send the old state (as large as the new one) for nothing.
            m.expected.encoded if m.created else None,
            m.encoded_state,
            paths_json(m.changed_paths),
            match.wake_all,
            match.read_keys,
            match.prefix_keys,
        ),
        history=(
            yieldstar_settings.VERSION_HISTORY_KEEP_STATE,
            yieldstar_settings.VERSION_HISTORY_LIMIT,
        ),
        unwait=list(unwait) if unwait else None,
        publish=publish,
    )


def commit_deletion(
    connection: BaseDatabaseWrapper, d: StoreDeletion, publish: Publish | None = None
) -> Committed:
    """Delete a store with ``yieldstar_commit_mutation_v4`` (a ``'delete'`` operation:
    only the identifying, step and relay-delay arguments apply); ``publish`` as for
    :func:`commit_mutation`."""
    return _call(connection, d, d.expected, publish=publish)


#: The arguments of a commit without a new state (a deletion): created, initial state,
#: state, changed paths, wake all, read keys, prefix keys.
NO_NEW_STATE: tuple[Any, ...] = (False, None, None, None, None, None, None)


def _call(
    connection: BaseDatabaseWrapper,
    commit: StoreMutation | StoreDeletion,
    expected: StoredState | None,
    *,
    new_state: tuple[Any, ...] = NO_NEW_STATE,
    history: tuple[Any, ...] = (None, None),
    unwait: list[str] | None = None,
    publish: Publish | None = None,
) -> Committed:
    """``commit_call`` with ``commit``'s store, comparison, step and operation, and the
    mutation's own arguments (``new_state``, ``history``: keep state and limit)."""
    step_id = commit.step_id
    params = [
        commit.definition.name,
        commit.id,
        expected.instance_id if expected else None,
        expected.version if expected else None,
        *new_state,
        step_id.execution_id if step_id else None,
        step_id.step_key if step_id else None,
        commit.encoded_result,
        commit.operation,
        *history,
        float(yieldstar_settings.RELAY_DELAY),
        unwait,
    ]
    if publish is None:
        row = fetchone(connection, queries.of(connection).commit_call, params)
        assert row is not None
        return _outcome(row)

    def during(row: tuple[Any, ...]) -> tuple[CommitOutcome, Callable[[], None]]:
        outcome, pending = _outcome(row)
        return outcome, publish(pending)

    outcome, after = overlap.call_then_commit(
        connection, queries.of(connection).commit_call, params, during
    )
    after()
    return outcome, []


def _pending(
    ids: list[int] | None, executions: list[str] | None, workflows: list[str] | None
) -> list[PendingWake]:
    """The wake intents a function wrote, from its three arrays (NULL: none)."""
    return [
        PendingWake(int(i), Wake(e, w))
        for i, e, w in zip(ids or [], executions or [], workflows or [], strict=True)
    ]


def _outcome(row: Sequence[Any]) -> Committed:
    status, recorded, instance_id, version, state, ids, executions, workflows = row
    if status == "committed":
        return COMMITTED, _pending(ids, executions, workflows)
    if status == "already-applied":
        return already_applied(recorded), []
    if status == "step-mismatch":
        return step_mismatch(recorded), []
    if status == "conflict":
        return conflict(StoredState(instance_id, int(version), state)), []
    return MISSING, []


def register_waiter(
    connection: BaseDatabaseWrapper,
    waiter: StoreWaiter,
    fence: waiters.LeaseFence | None = None,
    unless_stale: bool = False,
) -> waiters.Registration:
    """:func:`.waiters.register_waiter` as one call of ``yieldstar_register_waiter_v3``:
    one round trip, its own transaction outside ``transaction.atomic``; the same answer."""
    w = waiter
    read_paths = waiters.checked_paths(w)
    rows = waiter_path_rows(read_paths)
    other = waiter_path_rows(read_paths, same_instance=False)
    row = fetchone(
        connection,
        queries.of(connection).register_waiter_call,
        [
            w.store_name,
            w.store_id,
            w.workflow_id,
            w.execution_id,
            w.step_key,
            w.instance_id,
            w.since_version,
            paths_json(read_paths),
            [kind for kind, _ in rows],
            [key for _, key in rows],
            [kind for kind, _ in other],
            [key for _, key in other],
            now(connection),
            float(yieldstar_settings.RELAY_DELAY),
            connection.ops.adapt_datetimefield_value(clock.now()),
            None if fence is None else fence.owner,
            None if fence is None else list(fence.finished),
            w.cohort,
            unless_stale,
        ],
    )
    assert row is not None
    held, stale, ids, executions, workflows = row
    if not held:
        return None
    return waiters.Registered(not (stale and unless_stale), _pending(ids, executions, workflows))
