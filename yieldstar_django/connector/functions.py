"""The commit as one call of a PL/pgSQL function (PostgreSQL): one round trip.

The function is ``yieldstar_django/sql/yieldstar_commit_mutation_v3.sql`` (deletions since
migration ``0006_commit_deletes``); its steps are those of :mod:`.portable`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from ..conf import yieldstar_settings
from ..core.commits import (
    COMMITTED,
    MISSING,
    StoreDeletion,
    StoredState,
    StoreMutation,
    already_applied,
    conflict,
    step_mismatch,
)
from ..core.results import Wake
from ..core.waiter_index import path_match
from ..wakes.outbox import PendingWake
from . import statements as sql
from .arguments import paths_json
from .cursors import fetchone
from .portable import Committed

__all__ = ["commit_deletion", "commit_mutation"]


def commit_mutation(
    connection: BaseDatabaseWrapper, m: StoreMutation, unwait: Sequence[str] = ()
) -> Committed:
    """Commit ``m`` with ``yieldstar_commit_mutation_v3``, removing the waiters of the
    ``unwait`` step keys of its step's execution."""
    match = path_match(m.changed_paths)
    row = fetchone(
        connection,
        sql.COMMIT_CALL,
        [
            m.definition.name,
            m.id,
            m.expected.instance_id,
            m.expected.version,
            m.created,
            m.expected.encoded,
            m.encoded_state,
            paths_json(m.changed_paths),
            match.wake_all,
            match.read_keys,
            match.prefix_keys,
            m.step_id.execution_id if m.step_id else None,
            m.step_id.step_key if m.step_id else None,
            m.encoded_result,
            m.operation,
            yieldstar_settings.VERSION_HISTORY_KEEP_STATE,
            yieldstar_settings.VERSION_HISTORY_LIMIT,
            float(yieldstar_settings.RELAY_DELAY),
            list(unwait) if unwait else None,
        ],
    )
    assert row is not None
    return _outcome(row)


def commit_deletion(connection: BaseDatabaseWrapper, d: StoreDeletion) -> Committed:
    """Delete a store with ``yieldstar_commit_mutation_v3`` (a ``'delete'`` operation:
    only the identifying, step and relay-delay arguments apply)."""
    expected, step_id = d.expected, d.step_id
    row = fetchone(
        connection,
        sql.COMMIT_CALL,
        [
            d.definition.name,
            d.id,
            expected.instance_id if expected else None,
            expected.version if expected else None,
            False,
            *[None] * 6,
            step_id.execution_id if step_id else None,
            step_id.step_key if step_id else None,
            d.encoded_result,
            d.operation,
            None,
            None,
            float(yieldstar_settings.RELAY_DELAY),
            None,
        ],
    )
    assert row is not None
    return _outcome(row)


def _outcome(row: Sequence[Any]) -> Committed:
    status, recorded, instance_id, version, state, ids, executions, workflows = row
    if status == "committed":
        pending = [
            PendingWake(int(i), Wake(e, w))
            for i, e, w in zip(ids or [], executions or [], workflows or [], strict=True)
        ]
        return COMMITTED, pending
    if status == "already-applied":
        return already_applied(recorded), []
    if status == "step-mismatch":
        return step_mismatch(recorded), []
    if status == "conflict":
        return conflict(StoredState(instance_id, int(version), state)), []
    return MISSING, []
