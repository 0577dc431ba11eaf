"""The runtime's SQL, in one place: the lease statements (acquire, renew, release), the
lease-fenced heap writes, and the timers' intent statements.

Each builder takes the connection (for quoting) and names columns through the models'
``_meta`` (:func:`column`), so a statement follows the models. PostgreSQL gets single
statements with CTEs (one round trip); other databases use the ORM (see the callers).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field, Model

from ..models.runtime import TERMINAL_STATUSES, Execution, ExecutionStep
from ..models.stores import AppliedStep, StoreInstance, Waiter, WakeIntent
from ..wakes.outbox import ACK_CONDITION, INTENT_COLUMNS

__all__ = [
    "acquire_lease_sql",
    "cancel_timer_sql",
    "column",
    "fenced_insert_sql",
    "fenced_update_sql",
    "field",
    "intent_insert_sql",
    "lease_fence_sql",
    "rearm_timer_sql",
    "release_lease_sql",
    "renew_lease_sql",
    "set_clause",
]


@functools.cache
def field(model: type[Model], name: str) -> Field[Any, Any]:
    """The concrete field ``name`` of ``model``."""
    found = model._meta.get_field(name)
    assert isinstance(found, Field) and found.column is not None
    return found


def column(connection: BaseDatabaseWrapper, model: type[Model], name: str) -> str:
    """The quoted column of ``model``'s field ``name`` (computed once per vendor)."""
    key = (connection.vendor, model, name)
    quoted = _quoted.get(key)
    if quoted is None:
        db_column = field(model, name).column
        assert db_column is not None
        quoted = _quoted[key] = str(connection.ops.quote_name(db_column))
    return quoted


_quoted: dict[tuple[str, type[Model], str], str] = {}


def _table(connection: BaseDatabaseWrapper, model: type[Model]) -> str:
    return str(connection.ops.quote_name(model._meta.db_table))


def _columns(connection: BaseDatabaseWrapper, model: type[Model]) -> Callable[[str], str]:
    """``column`` bound to a connection and a model."""
    return lambda name: column(connection, model, name)


def set_clause(
    model: type[Model], changes: dict[str, Any], connection: BaseDatabaseWrapper
) -> tuple[str, list[Any]]:
    """``col = %s, ...`` for ``changes`` (field name: value), and the values prepared."""
    assignments: list[str] = []
    params: list[Any] = []
    for name, value in changes.items():
        assignments.append(f"{column(connection, model, name)} = %s")
        params.append(field(model, name).get_db_prep_save(value, connection=connection))
    return ", ".join(assignments), params


# --- leases ------------------------------------------------------------------------------


def lease_fence_sql(connection: BaseDatabaseWrapper) -> str:
    """The condition "this execution (``%s``) is leased by this run (``%s``) and live" on
    the execution table; then one ``%s`` per terminal status (sorted)."""
    e = _columns(connection, Execution)
    terminal = ", ".join(["%s"] * len(TERMINAL_STATUSES))
    return f"{e('id')} = %s AND {e('lease_owner')} = %s AND {e('status')} NOT IN ({terminal})"


def renew_lease_sql(connection: BaseDatabaseWrapper, *, run_again: bool = False) -> str:
    """Extend the lease (``lease_expires_at`` = ``%s``, then the fence's parameters) and
    move its takeover timer (``rearm_timer_sql``'s parameters) if it was extended; returns
    one row: how many leases were extended (0 or 1).

    With ``run_again`` (the holder runs the workflow again for a wake that arrived during
    its run) it also clears ``wake_pending`` and acknowledges the execution's due intents
    but the takeover timer (four more ``%s``: the time, then the ``ACK_CONDITION``'s
    execution id and time, then the timer's id): the run about to start satisfies them,
    while the timer guards the lease until it is released, so it never becomes an
    acknowledged row that retention may delete under a held lease."""
    e = _columns(connection, Execution)
    w = _columns(connection, WakeIntent)
    assignments = f"{e('lease_expires_at')} = %s"
    acked = ""
    if run_again:
        assignments += f", {e('wake_pending')} = false"
        acked = (
            f", acked AS (UPDATE {_table(connection, WakeIntent)} SET {w('delivered_at')} = %s "
            f"WHERE {ACK_CONDITION} AND {w('id')} <> %s AND EXISTS (SELECT 1 FROM renewed))"
        )
    return (
        f"WITH renewed AS (UPDATE {_table(connection, Execution)} SET {assignments} "
        f"WHERE {lease_fence_sql(connection)} RETURNING 1), "
        f"moved AS ({rearm_timer_sql(connection)} AND EXISTS "
        f"(SELECT 1 FROM renewed) RETURNING 1){acked} SELECT count(*) FROM renewed"
    )


def release_lease_sql(
    connection: BaseDatabaseWrapper,
    assignments: str,
    *,
    unless_wake_pending: bool,
    with_timer: bool,
    acknowledge_all: bool = False,
) -> str:
    """Apply ``assignments`` and let the lease go (the fence's parameters follow the
    assignments'), deleting the takeover timer (one more ``%s``: its id) ``with_timer``,
    and with ``acknowledge_all`` (a finished execution) marking every intent of the
    execution delivered (two more: the time and the execution id) if it released;
    returns one row: how many leases were released (0 or 1)."""
    condition = lease_fence_sql(connection)
    if unless_wake_pending:
        condition += f" AND NOT {column(connection, Execution, 'wake_pending')}"
    sql = (
        f"WITH released AS (UPDATE {_table(connection, Execution)} SET "
        f"{assignments} WHERE {condition} RETURNING 1)"
    )
    if with_timer:
        sql += (
            f", dropped AS ({cancel_timer_sql(connection)} AND EXISTS "
            "(SELECT 1 FROM released) RETURNING 1)"
        )
    if acknowledge_all:
        w = _columns(connection, WakeIntent)
        sql += (
            f", acked AS (UPDATE {_table(connection, WakeIntent)} SET {w('delivered_at')} = %s "
            f"WHERE {w('execution_id')} = %s AND {w('delivered_at')} IS NULL "
            "AND EXISTS (SELECT 1 FROM released) RETURNING 1)"
        )
    return sql + " SELECT count(*) FROM released"


def acquire_lease_sql(
    connection: BaseDatabaseWrapper,
    execution_fields: Sequence[Field[Any, Any]],
    heap_fields: Sequence[str],
    *,
    relaxed: bool,
) -> str:
    """Take a free or expired lease of a live execution, acknowledge its due intents,
    insert its takeover timer, and read its heap and the stores it waits on, in one
    statement (PostgreSQL).

    With ``relaxed`` (a statement in autocommit) its commit does not wait for the WAL
    flush (``synchronous_commit`` off for this transaction only): a crash may lose it, but
    then nothing the run wrote after it survives either (a later durable commit flushes
    the WAL up to it), and the relay delivers the intents it acknowledged again. Built
    once per vendor and arguments.

    Parameters: owner token, expiry, status, ``updated_at``, execution id, the terminal
    statuses (sorted), now; the ``ACK_CONDITION``'s execution id and time and the
    acknowledgement time before them (``delivered_at``, id, due by); the timer's reason,
    ``available_at``, ``due_at``, ``created_at``. Returns the execution's
    ``execution_fields``, the timer's id, the heap as a JSON array of ``heap_fields`` and
    the reads of ``_reads_sql``.
    """
    key = (connection.vendor, tuple(f.name for f in execution_fields), tuple(heap_fields), relaxed)
    statement = _acquisitions.get(key)
    if statement is None:
        statement = _acquisitions[key] = _acquire_lease_sql(
            connection, execution_fields, heap_fields, relaxed
        )
    return statement


_acquisitions: dict[tuple[str, tuple[str, ...], tuple[str, ...], bool], str] = {}


def _acquire_lease_sql(
    connection: BaseDatabaseWrapper,
    execution_fields: Sequence[Field[Any, Any]],
    heap_fields: Sequence[str],
    relaxed: bool,
) -> str:
    e = _columns(connection, Execution)
    s = _columns(connection, ExecutionStep)
    w = _columns(connection, WakeIntent)
    terminal = ", ".join(["%s"] * len(TERMINAL_STATUSES))
    relax = ", (SELECT set_config('synchronous_commit', 'off', true)) AS relaxed"
    returning = ", ".join(e(f.name) for f in execution_fields)
    heap = (
        "SELECT COALESCE(json_agg(json_build_array("
        + ", ".join(f"s.{s(name)}" for name in heap_fields)
        + f") ORDER BY s.{s('position')}), '[]'::json) FROM "
        f"{_table(connection, ExecutionStep)} s WHERE s.{s('execution')} = acquired.{e('id')}"
    )
    return (
        f"WITH acquired AS (UPDATE {_table(connection, Execution)} SET "
        f"{e('lease_owner')} = %s, {e('lease_expires_at')} = %s, {e('wake_pending')} = false, "
        f"{e('status')} = %s, {e('runs')} = {e('runs')} + 1, {e('updated_at')} = %s "
        f"WHERE {e('id')} = %s AND {e('status')} NOT IN ({terminal}) AND "
        f"({e('lease_owner')} = '' OR {e('lease_expires_at')} < %s) RETURNING {returning}), "
        f"acked AS (UPDATE {_table(connection, WakeIntent)} SET {w('delivered_at')} = %s "
        f"WHERE {ACK_CONDITION} AND EXISTS (SELECT 1 FROM acquired)), "
        f"timer AS ({intent_insert_sql(connection)} FROM acquired RETURNING {w('id')}) "
        f"SELECT acquired.*, timer.{w('id')}, ({heap}), ({_reads_sql(connection, e('id'))}) "
        "FROM acquired, timer" + (relax if relaxed else "")
    )


#: The largest store state (bytes of its JSON) the lease acquisition reads ahead: a woken
#: step of a larger store reads it itself, so a wake never carries megabytes it may not use.
MAX_READ_AHEAD = 64 * 1024


def _reads_sql(connection: BaseDatabaseWrapper, execution_id: str) -> str:
    """The stores the acquired execution waits on, each as ``[step key, store name, store
    id, instance id, version, state, the step's ledger result or null]``: what the woken
    steps would read first (``READ_STORE_AND_STEP``), read with the lease; none whose
    state is over ``MAX_READ_AHEAD`` bytes."""
    w = _columns(connection, Waiter)
    i = _columns(connection, StoreInstance)
    a = _columns(connection, AppliedStep)
    return (
        f"SELECT COALESCE(json_agg(json_build_array(w.{w('step_key')}, i.{i('name')}, "
        f"i.{i('store_id')}, i.{i('instance_id')}, i.{i('version')}, i.{i('state')}, "
        f"a.{a('result')})), '[]'::json) FROM {_table(connection, Waiter)} w "
        f"JOIN {_table(connection, StoreInstance)} i ON i.{i('id')} = w.{w('store')} "
        f"LEFT JOIN {_table(connection, AppliedStep)} a ON a.{a('store_name')} = i.{i('name')} "
        f"AND a.{a('store_id')} = i.{i('store_id')} AND a.{a('execution_id')} = "
        f"w.{w('execution_id')} AND a.{a('step_key')} = w.{w('step_key')} "
        f"WHERE w.{w('execution_id')} = acquired.{execution_id} "
        f"AND octet_length(i.{i('state')}) <= {MAX_READ_AHEAD}"
    )


# --- the heap ----------------------------------------------------------------------------


def fenced_update_sql(connection: BaseDatabaseWrapper, assignments: str) -> str:
    """``UPDATE`` a pending heap row (id, status, attempts: three ``%s`` after the
    assignments') if nobody moved it on and the lease is ours (the fence's parameters)."""
    s = _columns(connection, ExecutionStep)
    return (
        f"UPDATE {_table(connection, ExecutionStep)} SET {assignments} "
        f"WHERE {s('id')} = %s AND {s('status')} = %s AND {s('attempts')} = %s "
        f"AND EXISTS (SELECT 1 FROM {_table(connection, Execution)} "
        f"WHERE {lease_fence_sql(connection)})"
    )


def fenced_insert_sql(connection: BaseDatabaseWrapper, names: Sequence[str]) -> str:
    """``INSERT ... SELECT`` of a heap row (one ``%s`` per field of ``names``, then the
    fence's parameters) only while the lease is ours; nothing if the step is recorded.
    Built once per vendor and list of names (every step writes one)."""
    key = (connection.vendor, tuple(names))
    statement = _fenced_inserts.get(key)
    if statement is None:
        statement = _fenced_inserts[key] = _fenced_insert_sql(connection, names)
    return statement


_fenced_inserts: dict[tuple[str, tuple[str, ...]], str] = {}


def _fenced_insert_sql(connection: BaseDatabaseWrapper, names: Sequence[str]) -> str:
    columns = ", ".join(column(connection, ExecutionStep, name) for name in names)
    # The SELECT list gives its values no column to take a type from: each is cast to
    # its column's (a parameter bound on the server would be text otherwise).
    placeholders = ", ".join(
        f"CAST(%s AS {field(ExecutionStep, name).cast_db_type(connection)})" for name in names
    )
    unique = ", ".join(
        column(connection, ExecutionStep, name) for name in ("execution", "step_key")
    )
    return (
        f"INSERT INTO {_table(connection, ExecutionStep)} ({columns}) "
        f"SELECT {placeholders} WHERE EXISTS (SELECT 1 FROM "
        f"{_table(connection, Execution)} WHERE {lease_fence_sql(connection)}) "
        f"ON CONFLICT ({unique}) DO NOTHING"
    )


# --- timers ------------------------------------------------------------------------------


def intent_insert_sql(
    connection: BaseDatabaseWrapper,
    *,
    execution_column: str = "id",
    workflow_column: str = "workflow_id",
) -> str:
    """``INSERT INTO <wake intents> (...) SELECT <execution id>, <workflow id>, %s, %s, ...``
    to follow with ``FROM <a relation>``: one pending wake intent per row of the relation,
    a timer written in the statement that needs it. Its parameters are the reason,
    ``available_at``, ``due_at`` (the same time) and ``created_at``. The outbox's
    ``schedule_wake`` writes the same row."""
    quote = connection.ops.quote_name
    columns = ", ".join(_columns(connection, WakeIntent)(name) for name in INTENT_COLUMNS)
    return (
        f"INSERT INTO {_table(connection, WakeIntent)} ({columns}) "
        f"SELECT {quote(execution_column)}, {quote(workflow_column)}, %s, %s, %s, NULL, 0, '', %s"
    )


def rearm_timer_sql(connection: BaseDatabaseWrapper) -> str:
    """``UPDATE`` of one timer (the last ``%s``) to fire at the first two ``%s``
    (``available_at``, ``due_at``) as a new, unacknowledged intent, to append conditions
    to: a renewed lease moves its takeover timer."""
    w = _columns(connection, WakeIntent)
    return (
        f"UPDATE {_table(connection, WakeIntent)} SET {w('available_at')} = %s, "
        f"{w('due_at')} = %s, {w('delivered_at')} = NULL, {w('attempts')} = 0 "
        f"WHERE {w('id')} = %s"
    )


def cancel_timer_sql(connection: BaseDatabaseWrapper) -> str:
    """``DELETE`` of one undelivered intent by id (``%s``), to append conditions to."""
    w = _columns(connection, WakeIntent)
    return (
        f"DELETE FROM {_table(connection, WakeIntent)} WHERE {w('id')} = %s "
        f"AND {w('delivered_at')} IS NULL"
    )
