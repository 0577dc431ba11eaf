"""The database store client: the seed's compare-and-swap protocol on Django's database.

``get_store_client(using)`` returns a :class:`DatabaseStoreClient`, a ``CasStoreClient``
whose primitives commit in one database transaction each. ``CasStoreClient`` runs all user
code (``initial``, updaters, selectors, claims, schemas) before the transaction and hands
this module canonical JSON text, so a value the core rejects never reaches SQL.

A commit (``commit_mutation``) does, in one transaction, in this order:

1. the ledger lookup for the step id: a recorded result wins over every other check;
2. the store row lock (``FOR NO KEY UPDATE`` on PostgreSQL; SQLite's ``BEGIN IMMEDIATE``
   already holds the database write lock) and the (instance_id, version) comparison, or
   the insertion of a missing store (``ON CONFLICT DO NOTHING``, so concurrent first touches
   record one instance);
3. the ledger row (``ON CONFLICT DO NOTHING``: a concurrent commit of the same step that
   slipped in is reported as already applied and nothing is written);
4. the new state, the version row (and version 0 for a created store), history pruning;
5. the waiters whose read paths intersect the changed paths, found by index
   (:class:`~yieldstar_django.models.WaiterPath`), and one wake intent per woken execution.

``transaction.on_commit`` then hands the wakes to the ``WAKE_BACKEND``
(:mod:`yieldstar_django.wakes`). Every primitive joins an enclosing ``transaction.atomic``:
a user can change their models and stores in one transaction, wakes go out only when the
outermost transaction commits, and a rollback wakes nobody.

Locks are always taken in the same order, store row first, then ledger, versions, waiters
and outbox, and each commit locks a single store row. A transaction of your own that
changes several stores should change them in a consistent order (say, sorted by name and
id); PostgreSQL detects a deadlock between two that do not and aborts one.

On PostgreSQL a mutation or deletion is one call of a PL/pgSQL function (migration
``0002_postgres_functions``), one round trip; elsewhere the same steps run as separate
statements. Both must run at READ COMMITTED, PostgreSQL's default isolation level.

No application code runs inside these transactions. A caller that must record something of
its own atomically with a mutation (the runtime's heap row) hands it to the commit with
:meth:`DatabaseStoreClient.commit_hook` instead of wrapping the store call in
``transaction.atomic`` (which would hold the transaction, and SQLite's write lock, open
across the updater, selector or claim).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Final, cast

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from .conf import yieldstar_settings
from .core.constants import MAX_INSTANCE_ID_LENGTH, MAX_KEY_LENGTH, WaiterKind
from .core.definition import StoreDefinition
from .core.durable import DurableLimits
from .core.results import StoreStepId, StoreWaiter, Wake
from .core.store import (
    COMMITTED,
    MISSING,
    CasStoreClient,
    CommitOutcome,
    RetryPolicy,
    StoreDeletion,
    StoredState,
    StoreMutation,
    already_applied,
    conflict,
)
from .core.types import StorePath
from .core.waiter_index import PathMatch, path_match, waiter_path_rows
from .wakes.delivery import deliver_on_commit
from .wakes.outbox import PendingWake, in_clause, write_intents

__all__ = ["CommitHook", "DatabaseStoreClient", "get_store_client"]

STORE_TABLE: Final = "yieldstar_storeinstance"
VERSION_TABLE: Final = "yieldstar_storeversion"
LEDGER_TABLE: Final = "yieldstar_appliedstep"
WAITER_TABLE: Final = "yieldstar_waiter"
WAITER_PATH_TABLE: Final = "yieldstar_waiterpath"

COMMIT_MUTATION_FUNCTION: Final = "yieldstar_commit_mutation_v1"
COMMIT_DELETION_FUNCTION: Final = "yieldstar_commit_deletion_v1"

LEDGER_LOOKUP: Final = (
    f"SELECT result FROM {LEDGER_TABLE} WHERE store_name = %s AND store_id = %s "
    "AND execution_id = %s AND step_key = %s"
)
#: The ledger lookup and the store read at once: exactly one row (NULLs where missing).
READ_STORE_AND_STEP: Final = (
    f"SELECT l.result, s.instance_id, s.version, s.state FROM (SELECT 1 AS one) k "
    f"LEFT JOIN {LEDGER_TABLE} l ON l.store_name = %s AND l.store_id = %s "
    "AND l.execution_id = %s AND l.step_key = %s "
    f"LEFT JOIN {STORE_TABLE} s ON s.name = %s AND s.store_id = %s"
)


COMMIT_MUTATION_CALL: Final = (
    f"SELECT * FROM {COMMIT_MUTATION_FUNCTION}(%s::text, %s::text, %s::text, %s::bigint, "
    "%s::boolean, %s::text, %s::text, %s::text, %s::boolean, %s::text[], %s::text[], "
    "%s::text, %s::text, %s::text, %s::boolean, %s::bigint, %s::double precision)"
)
COMMIT_DELETION_CALL: Final = (
    f"SELECT * FROM {COMMIT_DELETION_FUNCTION}(%s::text, %s::text, %s::text, %s::bigint, "
    "%s::text, %s::text, %s::text, %s::double precision)"
)

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _paths_json(paths: Iterable[StorePath]) -> str:
    return json.dumps([list(p) for p in paths], ensure_ascii=True, separators=(",", ":"))


def _check_text(label: str, value: object, max_length: int = MAX_KEY_LENGTH) -> None:
    """Refuse, before any SQL, a key the tables cannot hold."""
    if not isinstance(value, str):
        raise TypeError(f"{label} must be a str, not {type(value).__name__}")
    if len(value) > max_length:
        raise ValueError(f"{label} is longer than {max_length} characters")
    if _UNSTORABLE.search(value):
        raise ValueError(f'{label} cannot hold "\\x00" or lone surrogates')


def _check_store(name: str, id: str) -> None:
    _check_text("store name", name)
    _check_text("store id", id)


def _check_step(step_id: StoreStepId | None) -> None:
    if step_id is not None:
        _check_text("step execution id", step_id.execution_id)
        _check_text("step key", step_id.step_key)


# --- commit hooks -----------------------------------------------------------------------


@dataclass(frozen=True)
class CommitHook:
    """Database work of a caller's to commit with a mutation, in the commit's transaction.

    ``prepare(m)`` runs before the transaction opens, with the mutation about to be
    committed; it does any encoding or checking (it must not write) and returns the work
    to do once ``m`` is written, before the transaction commits. ``before()`` runs first in
    the transaction, before the store row is locked. The transaction commits only if the
    mutation committed and neither raised: a conflict (which the core retries, preparing
    again), a recorded step or an exception rolls back the hook's writes too. An exception
    propagates to the store call. No user code may run in ``before`` or the work.
    """

    prepare: Callable[[StoreMutation], Callable[[], None]]
    before: Callable[[], None] | None = None


#: The hook of the current context and the database alias it applies to.
_commit_hook: ContextVar[tuple[str, CommitHook] | None] = ContextVar(
    "yieldstar_commit_hook", default=None
)


class _NotCommitted(Exception):
    """Rolls back a hooked commit that did not apply, carrying what it found."""

    def __init__(self, outcome: CommitOutcome) -> None:
        self.outcome = outcome


# --- the client -------------------------------------------------------------------------


class DatabaseStoreClient(CasStoreClient):
    """The ``CasStoreClient`` on a Django database alias (PostgreSQL or SQLite).

    Limits and the retry policy are read from ``YIELDSTAR`` settings on each call unless
    given here. ``use_functions`` picks the one-round-trip PL/pgSQL commit (default: on
    PostgreSQL) or the portable statements. ``commit_attempts`` counts calls of
    ``commit_mutation``/``commit_deletion`` (for contention figures).
    """

    def __init__(
        self,
        using: str = "default",
        *,
        limits: DurableLimits | None = None,
        retry: RetryPolicy | None = None,
        use_functions: bool | None = None,
    ) -> None:
        super().__init__(limits=limits, retry=retry)
        self.using = using
        self._explicit_limits = limits
        self._explicit_retry = retry
        self._use_functions = use_functions
        self.commit_attempts = 0

    def __repr__(self) -> str:
        return f"<DatabaseStoreClient using={self.using!r}>"

    # configuration

    def durable_limits(self) -> DurableLimits:
        if self._explicit_limits is not None:
            return self._explicit_limits
        return DurableLimits(
            max_bytes=yieldstar_settings.MAX_STATE_BYTES, max_depth=yieldstar_settings.MAX_DEPTH
        )

    def retry_policy(self) -> RetryPolicy:
        if self._explicit_retry is not None:
            return self._explicit_retry
        return RetryPolicy(
            max_attempts=yieldstar_settings.CAS_MAX_ATTEMPTS,
            base_delay=yieldstar_settings.CAS_BACKOFF_BASE,
            max_delay=yieldstar_settings.CAS_BACKOFF_MAX,
        )

    @property
    def connection(self) -> BaseDatabaseWrapper:
        return connections[self.using]

    def _postgres(self) -> bool:
        return self.connection.vendor == "postgresql"

    def _functions(self) -> bool:
        return self._use_functions is not False and self._postgres()

    def _lock(self, mode: str) -> str:
        """`` FOR <mode>`` on PostgreSQL; nothing on SQLite, whose IMMEDIATE transactions
        hold the write lock from their first statement."""
        return f" FOR {mode}" if self._postgres() else ""

    def _now(self) -> Any:
        return self.connection.ops.adapt_datetimefield_value(timezone.now())

    def _committed(self) -> None:
        """Called right after a primitive's own transaction committed, before the wakes are
        handed over and before it returns (not called inside an enclosing ``atomic``).
        A hook for fault-injection tests; does nothing."""

    def _fetchone(self, sql: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
        """Run one statement of the hot path and return its first row.

        On PostgreSQL this binds the parameters on the server (the extended protocol, one
        round trip, no quoting in Python), prepared only if the connection's
        ``OPTIONS["prepare_threshold"]`` asks for it (Django's default keeps it off for
        connection poolers); errors are Django's as usual. With query logging on (``DEBUG``,
        ``CaptureQueriesContext``) or an ``execute_wrapper`` installed, it goes through
        Django's cursor, so the statement is seen as any other.
        """
        connection = self.connection
        if (
            connection.vendor != "postgresql"
            or connection.queries_logged
            or connection.execute_wrappers
        ):
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
                return cast(tuple[Any, ...] | None, cursor.fetchone())
        connection.ensure_connection()
        connection.validate_no_broken_transaction()
        with connection.wrap_database_errors:
            cursor = _server_cursor(connection)
            cursor.execute(sql, params)
            return cast(tuple[Any, ...] | None, cursor.fetchone())

    def _finish(self, pending: Sequence[PendingWake]) -> None:
        if not self.connection.in_atomic_block:
            self._committed()
        deliver_on_commit(pending, using=self.using)

    # reads

    def read_store(self, definition: StoreDefinition, id: str) -> StoredState | None:
        _check_store(definition.name, id)
        row = self._fetchone(
            f"SELECT instance_id, version, state FROM {STORE_TABLE} "
            "WHERE name = %s AND store_id = %s",
            [definition.name, id],
        )
        return None if row is None else StoredState(row[0], int(row[1]), row[2])

    def get_applied_step(
        self, definition: StoreDefinition, id: str, step_id: StoreStepId
    ) -> str | None:
        _check_store(definition.name, id)
        _check_step(step_id)
        row = self._fetchone(
            LEDGER_LOOKUP, [definition.name, id, step_id.execution_id, step_id.step_key]
        )
        return None if row is None else str(row[0])

    def read_store_and_step(
        self, definition: StoreDefinition, id: str, step_id: StoreStepId
    ) -> tuple[str | None, StoredState | None]:
        """``(get_applied_step(...), read_store(...))`` in one statement (one round trip).

        For the start of an operation with a step id: a recorded result (the first item)
        wins, and the row is used only when there is none. Both lookups read one snapshot,
        as if the ledger were looked up just before the row was read.
        """
        _check_store(definition.name, id)
        _check_step(step_id)
        name = definition.name
        row = self._fetchone(
            READ_STORE_AND_STEP, [name, id, step_id.execution_id, step_id.step_key, name, id]
        )
        assert row is not None, "the query returns one row"
        recorded, instance_id, version, state = row
        stored = None if instance_id is None else StoredState(instance_id, int(version), state)
        return (None if recorded is None else str(recorded)), stored

    @staticmethod
    def _ledger_result(cursor: Any, name: str, id: str, step_id: StoreStepId) -> str | None:
        cursor.execute(LEDGER_LOOKUP, [name, id, step_id.execution_id, step_id.step_key])
        row = cursor.fetchone()
        return None if row is None else str(row[0])

    def list_stores(self, definition: StoreDefinition) -> list[str]:
        """Ids in ascending code-point order: ``COLLATE "C"`` (UTF-8 byte order) on
        PostgreSQL, SQLite's default ``BINARY`` collation elsewhere."""
        _check_text("store name", definition.name)
        collate = ' COLLATE "C"' if self._postgres() else ""
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT store_id FROM {STORE_TABLE} WHERE name = %s ORDER BY store_id{collate}",
                [definition.name],
            )
            return [row[0] for row in cursor.fetchall()]

    # creation

    def insert_store(
        self, definition: StoreDefinition, id: str, stored: StoredState
    ) -> StoredState:
        _check_store(definition.name, id)
        _check_text("instance id", stored.instance_id, MAX_INSTANCE_ID_LENGTH)
        while True:
            with transaction.atomic(using=self.using), self.connection.cursor() as cursor:
                if self._insert_row(cursor, definition.name, id, stored) is not None:
                    self._insert_version(
                        cursor,
                        definition.name,
                        id,
                        stored.instance_id,
                        0,
                        "[]",
                        None,
                        stored.encoded,
                    )
                    return stored
                existing = self._read_locked(cursor, definition.name, id, None)
                if existing is not None:
                    return existing[1]
            # The conflicting row was deleted before we could read it: try again.

    def _insert_row(self, cursor: Any, name: str, id: str, stored: StoredState) -> int | None:
        now = self._now()
        cursor.execute(
            f"INSERT INTO {STORE_TABLE} "
            "(name, store_id, instance_id, version, state, created_at, updated_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (name, store_id) DO NOTHING RETURNING id",
            [name, id, stored.instance_id, stored.version, stored.encoded, now, now],
        )
        row = cursor.fetchone()
        return None if row is None else int(row[0])

    def _read_locked(
        self, cursor: Any, name: str, id: str, mode: str | None
    ) -> tuple[int, StoredState] | None:
        lock = self._lock(mode) if mode else ""
        cursor.execute(
            f"SELECT id, instance_id, version, state FROM {STORE_TABLE} "
            f"WHERE name = %s AND store_id = %s{lock}",
            [name, id],
        )
        row = cursor.fetchone()
        if row is None:
            return None
        return int(row[0]), StoredState(row[1], int(row[2]), row[3])

    def _compare_and_lock(
        self, cursor: Any, name: str, id: str, expected: StoredState
    ) -> tuple[int, StoredState] | None:
        """The store row, locked if it is at ``expected`` (compare the returned row).

        On PostgreSQL the row is compared without a lock first, so the loser of a race
        learns of it without locking the row (a row lock writes WAL: its commit would wait
        for a flush while every other writer of the store queues on the lock)."""
        if self._postgres():
            cursor.execute(
                f"SELECT id, instance_id, version FROM {STORE_TABLE} "
                "WHERE name = %s AND store_id = %s",
                [name, id],
            )
            row = cursor.fetchone()
            if row is None:
                return None
            if (row[1], int(row[2])) != (expected.instance_id, expected.version):
                return self._read_locked(cursor, name, id, None)
        return self._read_locked(cursor, name, id, "NO KEY UPDATE")

    def _insert_version(
        self,
        cursor: Any,
        name: str,
        id: str,
        instance_id: str,
        version: int,
        paths: str,
        step_id: StoreStepId | None,
        encoded: str,
    ) -> None:
        keep = yieldstar_settings.VERSION_HISTORY_KEEP_STATE
        cursor.execute(
            f"INSERT INTO {VERSION_TABLE} (store_name, store_id, instance_id, version, "
            "changed_paths, step_execution_id, step_key, state, created_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [
                name,
                id,
                instance_id,
                version,
                paths,
                step_id.execution_id if step_id else None,
                step_id.step_key if step_id else None,
                encoded if keep else None,
                self._now(),
            ],
        )

    # commits

    @contextmanager
    def commit_hook(self, hook: CommitHook) -> Iterator[None]:
        """Run ``hook`` in the transaction of every ``commit_mutation`` made in this
        context (this thread or task) on this client's database.

        The store operation itself (``update_store``, ``take_from_store``, ...) runs its
        user code outside any transaction as always; only the commit, the hook's statements
        included, is one transaction. Nests: the innermost hook applies."""
        token = _commit_hook.set((self.using, hook))
        try:
            yield
        finally:
            _commit_hook.reset(token)

    def commit_mutation(self, mutation: StoreMutation) -> CommitOutcome:
        self.commit_attempts += 1
        _check_store(mutation.definition.name, mutation.id)
        _check_step(mutation.step_id)
        _check_text("instance id", mutation.expected.instance_id, MAX_INSTANCE_ID_LENGTH)
        hooked = _commit_hook.get()
        if hooked is not None and hooked[0] == self.using:
            outcome, pending = self._commit_hooked(mutation, hooked[1])
        elif self._functions():
            outcome, pending = self._commit_mutation_function(mutation)
        else:
            outcome, pending = self._commit_mutation_statements(mutation)
        if outcome.status == "committed":
            self._finish(pending)
        return outcome

    def _commit_hooked(
        self, mutation: StoreMutation, hook: CommitHook
    ) -> tuple[CommitOutcome, list[PendingWake]]:
        """The commit and ``hook``'s statements in one transaction (on PostgreSQL still
        one function call for the commit itself, between the hook's statements)."""
        work = hook.prepare(mutation)
        try:
            with transaction.atomic(using=self.using):
                if hook.before is not None:
                    hook.before()
                if self._functions():
                    outcome, pending = self._commit_mutation_function(mutation)
                else:
                    outcome, pending = self._commit_mutation_statements(mutation)
                if outcome.status != "committed":
                    raise _NotCommitted(outcome)
                work()
        except _NotCommitted as not_committed:
            return not_committed.outcome, []
        return outcome, pending

    def commit_deletion(self, deletion: StoreDeletion) -> CommitOutcome:
        self.commit_attempts += 1
        _check_store(deletion.definition.name, deletion.id)
        _check_step(deletion.step_id)
        outcome, pending = self._delete(
            deletion.definition.name,
            deletion.id,
            deletion.expected,
            deletion.step_id,
            deletion.encoded_result,
        )
        if outcome.status == "committed":
            self._finish(pending)
        return outcome

    def delete_store(self, definition: StoreDefinition, id: str) -> None:
        _check_store(definition.name, id)
        outcome, pending = self._delete(definition.name, id, None, None, None)
        if outcome.status == "committed":
            self._finish(pending)

    def _commit_mutation_function(
        self, m: StoreMutation
    ) -> tuple[CommitOutcome, list[PendingWake]]:
        match = path_match(m.changed_paths)
        limit = yieldstar_settings.VERSION_HISTORY_LIMIT
        row = self._fetchone(
            COMMIT_MUTATION_CALL,
            [
                m.definition.name,
                m.id,
                m.expected.instance_id,
                m.expected.version,
                m.created,
                m.expected.encoded,
                m.encoded_state,
                _paths_json(m.changed_paths),
                match.wake_all,
                match.read_keys,
                match.prefix_keys,
                m.step_id.execution_id if m.step_id else None,
                m.step_id.step_key if m.step_id else None,
                m.encoded_result,
                yieldstar_settings.VERSION_HISTORY_KEEP_STATE,
                limit,
                float(yieldstar_settings.RELAY_DELAY),
            ],
        )
        assert row is not None
        return _function_outcome(row)

    def _commit_mutation_statements(
        self, m: StoreMutation
    ) -> tuple[CommitOutcome, list[PendingWake]]:
        name, id, expected = m.definition.name, m.id, m.expected
        version = expected.version + 1
        recorded: str | None = None
        try:
            with transaction.atomic(using=self.using), self.connection.cursor() as cursor:
                if m.step_id is not None:
                    recorded = self._ledger_result(cursor, name, id, m.step_id)
                    if recorded is not None:
                        return already_applied(recorded), []
                if m.created:
                    pk = self._insert_row(
                        cursor,
                        name,
                        id,
                        StoredState(expected.instance_id, version, m.encoded_state),
                    )
                    if pk is None:
                        current = self._read_locked(cursor, name, id, "NO KEY UPDATE")
                        return (MISSING if current is None else conflict(current[1])), []
                else:
                    found = self._compare_and_lock(cursor, name, id, expected)
                    if found is None:
                        return MISSING, []
                    pk, current_state = found
                    if (current_state.instance_id, current_state.version) != (
                        expected.instance_id,
                        expected.version,
                    ):
                        return conflict(current_state), []
                if m.step_id is not None and not self._record_step(
                    cursor, name, id, m.step_id, m.encoded_result
                ):
                    recorded = self._ledger_result(cursor, name, id, m.step_id)
                    raise _StepRecordedMeanwhile
                now = self._now()
                if m.created:
                    self._insert_version(
                        cursor, name, id, expected.instance_id, 0, "[]", None, expected.encoded
                    )
                else:
                    cursor.execute(
                        f"UPDATE {STORE_TABLE} SET version = %s, state = %s, updated_at = %s "
                        "WHERE id = %s",
                        [version, m.encoded_state, now, pk],
                    )
                self._insert_version(
                    cursor,
                    name,
                    id,
                    expected.instance_id,
                    version,
                    _paths_json(m.changed_paths),
                    m.step_id,
                    m.encoded_state,
                )
                self._prune_versions(cursor, expected.instance_id, version)
                wakes = self._matching_wakes(cursor, pk, m.changed_paths)
                pending = write_intents(wakes, reason="store", using=self.using)
                return COMMITTED, pending
        except _StepRecordedMeanwhile:
            assert recorded is not None
            return already_applied(recorded), []

    def _record_step(
        self, cursor: Any, name: str, id: str, step_id: StoreStepId, result: str | None
    ) -> bool:
        """Insert the ledger row; False if the step is recorded already."""
        assert result is not None, "a step id needs a result to record"
        cursor.execute(
            f"INSERT INTO {LEDGER_TABLE} "
            "(store_name, store_id, execution_id, step_key, result, created_at) "
            "VALUES (%s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (store_name, store_id, execution_id, step_key) DO NOTHING RETURNING id",
            [name, id, step_id.execution_id, step_id.step_key, result, self._now()],
        )
        return cursor.fetchone() is not None

    def _prune_versions(self, cursor: Any, instance_id: str, version: int) -> None:
        limit = yieldstar_settings.VERSION_HISTORY_LIMIT
        if limit is not None and version >= limit:
            cursor.execute(
                f"DELETE FROM {VERSION_TABLE} WHERE instance_id = %s AND version = %s",
                [instance_id, version - limit],
            )

    def _matching_wakes(
        self, cursor: Any, store_pk: int, changed_paths: Sequence[StorePath]
    ) -> list[Wake]:
        """The executions whose waiters the changed paths wake, in registration order."""
        sql, params = matching_waiters_sql(store_pk, path_match(changed_paths))
        cursor.execute(sql, params)
        return [Wake(e, w) for e, w in cursor.fetchall()]

    def _delete(
        self,
        name: str,
        id: str,
        expected: StoredState | None,
        step_id: StoreStepId | None,
        result: str | None,
    ) -> tuple[CommitOutcome, list[PendingWake]]:
        if self._functions():
            row = self._fetchone(
                COMMIT_DELETION_CALL,
                [
                    name,
                    id,
                    expected.instance_id if expected else None,
                    expected.version if expected else None,
                    step_id.execution_id if step_id else None,
                    step_id.step_key if step_id else None,
                    result,
                    float(yieldstar_settings.RELAY_DELAY),
                ],
            )
            assert row is not None
            return _function_outcome(row)
        with transaction.atomic(using=self.using), self.connection.cursor() as cursor:
            if step_id is not None:
                recorded = self._ledger_result(cursor, name, id, step_id)
                if recorded is not None:
                    return already_applied(recorded), []
            found = self._read_locked(cursor, name, id, "UPDATE")
            if found is None:
                return MISSING, []
            pk, current = found
            if expected is not None and (current.instance_id, current.version) != (
                expected.instance_id,
                expected.version,
            ):
                return conflict(current), []
            if step_id is not None and not self._record_step(cursor, name, id, step_id, result):
                recorded = self._ledger_result(cursor, name, id, step_id)
                assert recorded is not None
                return already_applied(recorded), []
            wakes = self._matching_wakes(cursor, pk, [()])  # a change at the root: all waiters
            cursor.execute(f"DELETE FROM {WAITER_PATH_TABLE} WHERE store_pk = %s", [pk])
            cursor.execute(f"DELETE FROM {WAITER_TABLE} WHERE store_pk = %s", [pk])
            cursor.execute(f"DELETE FROM {STORE_TABLE} WHERE id = %s", [pk])
            return COMMITTED, write_intents(wakes, reason="delete", using=self.using)

    # waiters

    def register_waiter(self, waiter: StoreWaiter) -> None:
        """Register ``waiter``, linearizably with every mutation of its store.

        In one transaction: read the store row under a share lock (``FOR SHARE`` on
        PostgreSQL, which conflicts with the ``FOR NO KEY UPDATE`` a commit takes; SQLite's
        ``BEGIN IMMEDIATE`` serializes all writers), compare its (instance_id, version)
        with the waiter's, upsert the waiter and its path rows, and, if the observation is
        stale, write a wake intent in the same transaction. A mutation therefore either
        committed before the lock was granted (the version moved: the waiter is woken at
        once) or takes the row lock after this transaction committed, and its waiter
        lookup, a later statement at READ COMMITTED, sees the new waiter. A missing store
        wakes the waiter at once and registers nothing.

        Registering again for the same (execution, step, store) replaces the observation.

        Inside a caller's ``transaction.atomic()`` it joins that transaction without a
        savepoint (two round trips fewer): the registration commits or rolls back with the
        caller's work, and a database error here dooms the caller's transaction (Django's
        ``savepoint=False``). Arguments are checked before the first statement, so a
        rejected waiter leaves the caller's transaction usable.
        """
        w = waiter
        _check_store(w.store_name, w.store_id)
        _check_text("workflow id", w.workflow_id)
        _check_text("execution id", w.execution_id)
        _check_text("step key", w.step_key)
        _check_text("instance id", w.instance_id, MAX_INSTANCE_ID_LENGTH)
        read_paths = [tuple(p) for p in w.read_paths]
        wake = Wake(w.execution_id, w.workflow_id)
        with (
            transaction.atomic(using=self.using, savepoint=False),
            self.connection.cursor() as cursor,
        ):
            cursor.execute(
                f"SELECT id, instance_id, version FROM {STORE_TABLE} "
                f"WHERE name = %s AND store_id = %s{self._lock('SHARE')}",
                [w.store_name, w.store_id],
            )
            row = cursor.fetchone()
            if row is None:
                pending = write_intents([wake], reason="missing", using=self.using)
            else:
                store_pk, instance_id, version = int(row[0]), row[1], int(row[2])
                same_instance = instance_id == w.instance_id
                cursor.execute(
                    f"INSERT INTO {WAITER_TABLE} (workflow_id, execution_id, step_key, store_pk, "
                    "instance_id, since_version, read_paths, created_at) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT (execution_id, step_key, store_pk) DO UPDATE SET "
                    "workflow_id = excluded.workflow_id, instance_id = excluded.instance_id, "
                    "since_version = excluded.since_version, read_paths = excluded.read_paths, "
                    "created_at = excluded.created_at RETURNING id",
                    [
                        w.workflow_id,
                        w.execution_id,
                        w.step_key,
                        store_pk,
                        w.instance_id,
                        w.since_version,
                        _paths_json(read_paths),
                        self._now(),
                    ],
                )
                fetched = cursor.fetchone()
                assert fetched is not None
                waiter_pk = int(fetched[0])
                cursor.execute(f"DELETE FROM {WAITER_PATH_TABLE} WHERE waiter_id = %s", [waiter_pk])
                rows = waiter_path_rows(read_paths, same_instance=same_instance)
                for start in range(0, len(rows), 500):
                    chunk = rows[start : start + 500]
                    cursor.execute(
                        f"INSERT INTO {WAITER_PATH_TABLE} (waiter_id, store_pk, kind, path) VALUES "
                        + ", ".join(["(%s, %s, %s, %s)"] * len(chunk)),
                        [v for kind, key in chunk for v in (waiter_pk, store_pk, kind, key)],
                    )
                stale = not same_instance or version != w.since_version
                pending = write_intents([wake], reason="stale", using=self.using) if stale else []
        self._finish(pending)

    def remove_waiters(self, execution_id: str, step_key: str | None = None) -> None:
        """Delete the waiters (and their path rows) of an execution, or of one of its steps.

        Joins a caller's ``transaction.atomic()`` without a savepoint, as
        ``register_waiter`` does."""
        _check_text("execution id", execution_id)
        where, params = "execution_id = %s", [execution_id]
        if step_key is not None:
            _check_text("step key", step_key)
            where, params = where + " AND step_key = %s", [execution_id, step_key]
        with (
            transaction.atomic(using=self.using, savepoint=False),
            self.connection.cursor() as cursor,
        ):
            cursor.execute(
                f"DELETE FROM {WAITER_PATH_TABLE} WHERE waiter_id IN "
                f"(SELECT id FROM {WAITER_TABLE} WHERE {where})",
                params,
            )
            cursor.execute(f"DELETE FROM {WAITER_TABLE} WHERE {where}", params)

    def waiters(self, definition: StoreDefinition, id: str) -> list[StoreWaiter]:
        """The waiters registered on a store, in registration order."""
        _check_store(definition.name, id)
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT w.workflow_id, w.execution_id, w.step_key, w.instance_id, "
                f"w.since_version, w.read_paths FROM {WAITER_TABLE} w "
                f"JOIN {STORE_TABLE} s ON s.id = w.store_pk "
                "WHERE s.name = %s AND s.store_id = %s ORDER BY w.id",
                [definition.name, id],
            )
            return [
                StoreWaiter(
                    wf,
                    ex,
                    key,
                    definition.name,
                    id,
                    inst,
                    int(since),
                    tuple(tuple(p) for p in json.loads(paths)),
                )
                for wf, ex, key, inst, since, paths in cursor.fetchall()
            ]


def _server_cursor(connection: BaseDatabaseWrapper) -> Any:
    """A server-binding psycopg cursor on ``connection``'s current psycopg connection,
    kept on the wrapper (which belongs to one thread) and replaced after a reconnection."""
    import psycopg

    raw = connection.connection
    cached = getattr(connection, "_yieldstar_cursor", None)
    if cached is None or cached[0] is not raw or cached[1].closed:
        cached = (raw, psycopg.Cursor(raw))
        connection._yieldstar_cursor = cached  # type: ignore[attr-defined]
    return cached[1]


class _StepRecordedMeanwhile(Exception):
    """Rolls back a commit whose step was recorded by a concurrent commit."""


def matching_waiters_sql(store_pk: int, match: PathMatch) -> tuple[str, list[Any]]:
    """The portable query for the (execution_id, workflow_id) pairs a change wakes, in
    registration order. Every lookup is an equality on the ``(store_pk, kind, path)``
    index."""
    if match.wake_all:
        return (
            f"SELECT execution_id, workflow_id FROM {WAITER_TABLE} WHERE store_pk = %s "
            "GROUP BY execution_id, workflow_id ORDER BY MIN(id)",
            [store_pk],
        )
    always = f"kind = {WaiterKind.ALWAYS:d}"
    parts = [f"SELECT waiter_id FROM {WAITER_PATH_TABLE} WHERE store_pk = %s AND {always}"]
    params: list[Any] = [store_pk]
    for kind, keys in ((WaiterKind.READ, match.read_keys), (WaiterKind.PREFIX, match.prefix_keys)):
        if keys:
            parts.append(
                f"SELECT waiter_id FROM {WAITER_PATH_TABLE} WHERE store_pk = %s "
                f"AND kind = {kind:d} AND path IN ({in_clause(len(keys))})"
            )
            params += [store_pk, *keys]
    sql = (
        f"SELECT execution_id, workflow_id FROM {WAITER_TABLE} WHERE id IN ("
        + " UNION ALL ".join(parts)
        + ") GROUP BY execution_id, workflow_id ORDER BY MIN(id)"
    )
    return sql, params


def _function_outcome(row: Sequence[Any]) -> tuple[CommitOutcome, list[PendingWake]]:
    status, recorded, instance_id, version, state, ids, executions, workflows = row
    if status == "committed":
        pending = [
            PendingWake(int(i), Wake(e, w))
            for i, e, w in zip(ids or [], executions or [], workflows or [], strict=True)
        ]
        return COMMITTED, pending
    if status == "already-applied":
        return already_applied(recorded), []
    if status == "conflict":
        return conflict(StoredState(instance_id, int(version), state)), []
    return MISSING, []


_clients: dict[str, DatabaseStoreClient] = {}
_clients_lock = threading.Lock()


def get_store_client(using: str = "default") -> DatabaseStoreClient:
    """The store client of a database alias (one per alias, shared by threads: it keeps no
    connection, Django's connections are per thread)."""
    client = _clients.get(using)
    if client is None:
        with _clients_lock:
            client = _clients.setdefault(using, DatabaseStoreClient(using))
    return client
