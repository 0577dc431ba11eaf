"""The runtime's statements whose text depends on their arguments, completed from the
named entries of ``yieldstar_django/sql/queries.sql``: the lease statements (acquire,
renew, release) and the lease-fenced heap writes.

A statement the same on every call (a heap insert, an acquisition) is completed once per
vendor and arguments and kept; a ``SET`` list (:func:`set_clause`) is built per call from
the changes, as its values are. PostgreSQL gets single statements with CTEs (one round
trip); other databases use the ORM for the leases (see the callers).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field, Model

from ..models.runtime import Execution, ExecutionStep
from ..sql import queries

__all__ = [
    "MAX_READ_AHEAD",
    "acquire_lease_sql",
    "column",
    "fenced_insert_sql",
    "fenced_update_sql",
    "field",
    "lease_fence_sql",
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


def set_clause(
    model: type[Model], changes: dict[str, Any], connection: BaseDatabaseWrapper
) -> tuple[str, list[Any]]:
    """``col = %s, ...`` for ``changes`` (field name: value), and the values prepared: the
    ``assignments`` point of ``release_lease`` and ``update_step_fenced``."""
    assignments: list[str] = []
    params: list[Any] = []
    for name, value in changes.items():
        assignments.append(f"{column(connection, model, name)} = %s")
        params.append(field(model, name).get_db_prep_save(value, connection=connection))
    return ", ".join(assignments), params


# --- leases ------------------------------------------------------------------------------


def lease_fence_sql(connection: BaseDatabaseWrapper) -> str:
    """``lease_fence``: "this execution (``%s``) is leased by this run (``%s``) and live"
    on the execution table; then one ``%s`` per terminal status (sorted)."""
    return queries.of(connection).lease_fence


def renew_lease_sql(connection: BaseDatabaseWrapper, *, run_again: bool = False) -> str:
    """``renew_lease``: extend the lease (``lease_expires_at`` = ``%s``, then the fence's
    parameters) and move its takeover timer (``available_at``, ``due_at``, its id) if it
    was extended; returns one row: how many leases were extended (0 or 1).

    With ``run_again`` (``renew_lease_run_again``: the holder runs the workflow again for
    a wake that arrived during its run) it also clears ``wake_pending`` and acknowledges
    the execution's due intents but the takeover timer (four more ``%s``: the time, then
    the ``ack_condition``'s execution id and time, then the timer's id): the run about to
    start satisfies them, while the timer guards the lease until it is released, so it
    never becomes an acknowledged row that retention may delete under a held lease."""
    if run_again:
        return queries.of(connection).renew_lease_run_again
    return queries.of(connection).renew_lease


def release_lease_sql(
    connection: BaseDatabaseWrapper,
    assignments: str,
    *,
    unless_wake_pending: bool,
    acknowledge_all: bool = False,
    unless_awaited: bool = False,
) -> str:
    """Apply ``assignments`` and let the lease go (the fence's parameters follow the
    assignments'), deleting the takeover timer (one more ``%s``: its id, ``None`` for a
    lease without one), and with ``acknowledge_all`` (a finished execution) marking every
    intent of the execution delivered (two more: the time and the execution id) if it
    released; returns one row: how many leases were released (0 or 1). Not both flags.
    With ``unless_awaited`` (and ``acknowledge_all``) nothing happens while another
    execution waits for this one (``awaited``)."""
    if acknowledge_all:
        assert not unless_wake_pending, "a finished execution releases unconditionally"
        statement = (
            queries.of(connection).release_lease_finished_unawaited
            if unless_awaited
            else queries.of(connection).release_lease_finished
        )
    elif unless_wake_pending:
        statement = queries.of(connection).release_lease_unless_wake_pending
    else:
        statement = queries.of(connection).release_lease
    return statement.format(assignments=assignments)


def acquire_lease_sql(
    connection: BaseDatabaseWrapper,
    execution_fields: Sequence[Field[Any, Any]],
    heap_fields: Sequence[str],
    *,
    relaxed: bool,
) -> str:
    """``acquire_lease``: take a free or expired lease of a live execution, acknowledge
    its due intents, insert its takeover timer, and read its heap and the stores it waits
    on, in one statement (PostgreSQL).

    With ``relaxed`` (a statement in autocommit) its commit does not wait for the WAL
    flush (``synchronous_commit`` off for this transaction only): a crash may lose it, but
    then nothing the run wrote after it survives either (a later durable commit flushes
    the WAL up to it), and the relay delivers the intents it acknowledged again. Built
    once per vendor and arguments.

    Parameters: owner token, expiry, status, ``updated_at``, execution id, the terminal
    statuses (sorted), now; the ``ack_condition``'s execution id and time and the
    acknowledgement time before them (``delivered_at``, id, due by); the timer's reason,
    ``available_at``, ``due_at``, ``created_at``. Returns the execution's
    ``execution_fields``, the timer's id, the heap as a JSON array of ``heap_fields`` and
    the stores it waits on, each as ``[step key, store name, store id, instance id,
    version, state, the step's ledger result or null]`` (what the woken steps would read
    first, ``read_store_and_step``), none whose state is over ``MAX_READ_AHEAD`` bytes.
    """
    key = (connection.vendor, tuple(f.name for f in execution_fields), tuple(heap_fields), relaxed)
    statement = _acquisitions.get(key)
    if statement is None:
        statement = _acquisitions[key] = queries.of(connection).acquire_lease.format(
            columns=", ".join(column(connection, Execution, f.name) for f in execution_fields),
            heap=", ".join(f"s.{column(connection, ExecutionStep, name)}" for name in heap_fields),
            max_read_ahead=MAX_READ_AHEAD,
            relaxed=queries.of(connection).synchronous_commit_off if relaxed else "",
        )
    return statement


_acquisitions: dict[tuple[str, tuple[str, ...], tuple[str, ...], bool], str] = {}

#: The largest store state (bytes of its JSON) the lease acquisition reads ahead: a woken
#: step of a larger store reads it itself, so a wake never carries megabytes it may not use.
MAX_READ_AHEAD = 64 * 1024


# --- the heap ----------------------------------------------------------------------------


def fenced_update_sql(connection: BaseDatabaseWrapper, assignments: str) -> str:
    """``update_step_fenced``: ``UPDATE`` a pending heap row (id, status, attempts: three
    ``%s`` after the assignments') if nobody moved it on and the lease is ours (the
    fence's parameters)."""
    return queries.of(connection).update_step_fenced.format(assignments=assignments)


def fenced_insert_sql(connection: BaseDatabaseWrapper, names: Sequence[str]) -> str:
    """``insert_step_fenced``: ``INSERT ... SELECT`` of a heap row (one ``%s`` per field of
    ``names``, then the fence's parameters) only while the lease is ours; nothing if the
    step is recorded. Built once per vendor and list of names (every step writes one)."""
    key = (connection.vendor, tuple(names))
    statement = _fenced_inserts.get(key)
    if statement is None:
        # The SELECT list gives its values no column to take a type from: each is cast to
        # its column's (a parameter bound on the server would be text otherwise).
        statement = _fenced_inserts[key] = queries.of(connection).insert_step_fenced.format(
            columns=", ".join(column(connection, ExecutionStep, name) for name in names),
            values=", ".join(
                f"CAST(%s AS {field(ExecutionStep, name).cast_db_type(connection)})"
                for name in names
            ),
        )
    return statement


_fenced_inserts: dict[tuple[str, tuple[str, ...]], str] = {}
