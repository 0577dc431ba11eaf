"""``DatabaseStoreClient``: the compare-and-swap store protocol on a Django database.

``CasStoreClient`` (``core/cas.py``) runs all user code (``initial``, updaters,
selectors, claims, schemas) before any transaction and hands this client canonical JSON
text; each primitive here commits in one database transaction, by one PL/pgSQL call on
PostgreSQL (:mod:`.functions`) or as separate statements (:mod:`.portable`). See
``docs/internals/architecture.md#lock-order`` for the order of the locks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext

from django.core.exceptions import ImproperlyConfigured
from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from ..conf import database_alias, yieldstar_settings
from ..core.cas import CasStoreClient
from ..core.commits import CommitOutcome, RetryPolicy, StoreDeletion, StoredState, StoreMutation
from ..core.constants import MAX_INSTANCE_ID_LENGTH
from ..core.definition import StoreDefinition
from ..core.durable import DurableLimits
from ..core.keys import check_ledger_key, check_removal, check_store, check_text
from ..core.results import StoreStepId, StoreWaiter
from ..manual_transaction import open_manual_transaction
from ..observability import metrics, tracing
from ..sql import queries
from ..wakes.backends import is_enqueue_only
from ..wakes.delivery import deliver_on_commit, publish_during_commit
from ..wakes.outbox import PendingWake
from . import functions, overlap, portable, waiters as waiter_rows
from .cursors import fetchall, fetchone
from .hooks import CommitHook, NotCommitted, current_hook
from .portable import Committed
from .store_queue import store_queue
from .waiters import LeaseFence, LeaseNotHeld

__all__ = ["DatabaseStoreClient", "get_store_client", "in_callers_transaction"]


class DatabaseStoreClient(CasStoreClient):
    """The ``CasStoreClient`` on a Django database alias (PostgreSQL or SQLite).

    ``using`` is a database alias (``DATABASE_ALIAS`` by default). Limits and the retry
    policy are read from ``YIELDSTAR`` settings on each call unless given here.
    ``use_functions`` picks the one-round-trip PL/pgSQL commit (default: on PostgreSQL) or
    the portable statements. ``commit_attempts`` counts calls of
    ``commit_mutation``/``commit_deletion`` (for contention figures).

    Every primitive joins an enclosing ``transaction.atomic`` (or the transaction of a
    connection with autocommit off, on SQLite opened ``BEGIN IMMEDIATE`` if none is open
    yet: :mod:`yieldstar_django.manual_transaction`): wakes go out only when the outermost
    transaction commits, and a rollback wakes nobody. In autocommit, a commit on
    PostgreSQL publishes its wakes while the database commits it, when the
    ``WAKE_BACKEND`` only enqueues (:mod:`.overlap`, ``PUBLISH_DURING_COMMIT``). No
    application code runs inside these transactions; work of a caller's that must commit
    with a mutation goes through :meth:`commit_hook`.
    """

    def __init__(
        self,
        using: str | None = None,
        *,
        limits: DurableLimits | None = None,
        retry: RetryPolicy | None = None,
        use_functions: bool | None = None,
    ) -> None:
        super().__init__(limits=limits, retry=retry)
        self.using = database_alias(using)
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
            max_bytes=yieldstar_settings.MAX_STATE_BYTES,
            max_depth=yieldstar_settings.MAX_DEPTH,
            max_nodes=yieldstar_settings.MAX_STATE_NODES,
        )

    def retry_policy(self) -> RetryPolicy:
        if self._explicit_retry is not None:
            return self._explicit_retry
        return RetryPolicy(
            max_attempts=yieldstar_settings.CAS_MAX_ATTEMPTS,
            base_delay=yieldstar_settings.CAS_BACKOFF_BASE,
            max_delay=yieldstar_settings.CAS_BACKOFF_MAX,
            queue_after=yieldstar_settings.CAS_QUEUE_AFTER,
        )

    def queue(
        self, definition: StoreDefinition, id: str, step_id: StoreStepId | None = None
    ) -> AbstractContextManager[None]:
        """On PostgreSQL outside ``transaction.atomic``: the next attempt in a transaction
        that locks the store row first (:func:`.store_queue.store_queue`), after the
        waiters a hooked claim of ``step_id`` removes when there are several (the commit
        hook's ``unwait``, as the commit itself takes them). Elsewhere none: SQLite runs
        one writer at a time, and inside a caller's transaction the lock could not be
        released before that transaction ends."""
        connection = self.connection
        if connection.vendor != "postgresql" or self.in_transaction():
            return nullcontext()
        hooked = current_hook.get()
        unwait: tuple[str, ...] = ()
        if hooked is not None and hooked[0] == self.using and step_id is not None:
            unwait = hooked[1].unwait
        execution_id = step_id.execution_id if step_id is not None else ""
        return store_queue(connection, self.using, definition.name, id, execution_id, unwait)

    def snapshot_capacity(self) -> int:
        return yieldstar_settings.SNAPSHOT_CACHE_SIZE

    def may_remember(self) -> bool:
        """Only rows read or committed outside a caller's transaction are committed for good."""
        return not self.in_transaction()

    def in_transaction(self) -> bool:
        """Whether a primitive called now joins a transaction of the caller's, which a
        rollback could undo (:func:`in_callers_transaction`)."""
        return in_callers_transaction(self.connection)

    @property
    def connection(self) -> BaseDatabaseWrapper:
        return connections[self.using]

    def _functions(self) -> bool:
        return self._use_functions is not False and self.connection.vendor == "postgresql"

    def _committed(self) -> None:
        """Called right after a primitive's own transaction committed, before the wakes are
        handed over (after, when they were published during the commit) and before it
        returns (not called inside an enclosing ``atomic``). A hook for fault-injection
        tests; does nothing."""

    def _finish(self, pending: Sequence[PendingWake]) -> None:
        if not self.in_transaction():
            self._committed()
        deliver_on_commit(pending, using=self.using)

    # reads

    def read_store(self, definition: StoreDefinition, id: str) -> StoredState | None:
        """The row; on PostgreSQL a state longer than ``READ_PIECE_BYTES`` read in pieces
        of that size (:func:`read_pieces`)."""
        check_store(definition.name, id)
        connection = self.connection
        if connection.vendor == "postgresql":
            return read_pieces(connection, definition.name, id)
        row = fetchone(connection, queries.of(connection).read_store, [definition.name, id])
        return None if row is None else StoredState(row[0], int(row[1]), row[2])

    def get_applied_step(
        self, definition: StoreDefinition, id: str, step_id: StoreStepId
    ) -> str | None:
        check_ledger_key(definition.name, id, step_id)
        row = fetchone(
            self.connection,
            queries.of(self.connection).ledger_lookup,
            [definition.name, id, step_id.execution_id, step_id.step_key],
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
        check_ledger_key(definition.name, id, step_id)
        name = definition.name
        row = fetchone(
            self.connection,
            queries.of(self.connection).read_store_and_step,
            [name, id, step_id.execution_id, step_id.step_key, name, id],
        )
        assert row is not None, "the query returns one row"
        recorded, instance_id, version, state = row
        stored = None if instance_id is None else StoredState(instance_id, int(version), state)
        return (None if recorded is None else str(recorded)), stored

    def known_read(
        self, definition: StoreDefinition, id: str, step_id: StoreStepId
    ) -> tuple[str | None, StoredState | None] | None:
        """The read the current ``CommitHook`` holds for this store and step, once."""
        hooked = current_hook.get()
        if hooked is None or hooked[0] != self.using or not hooked[1].reads:
            return None
        key = (definition.name, id, step_id.execution_id, step_id.step_key)
        return hooked[1].reads.pop(key, None)

    def list_stores(self, definition: StoreDefinition) -> list[str]:
        """Ids in ascending code-point order: ``COLLATE "C"`` (UTF-8 byte order) on
        PostgreSQL, SQLite's default ``BINARY`` collation elsewhere."""
        check_text("store name", definition.name)
        with self.connection.cursor() as cursor:
            cursor.execute(queries.of(self.connection).list_store_ids, [definition.name])
            return [row[0] for row in cursor.fetchall()]

    # creation

    def insert_store(
        self, definition: StoreDefinition, id: str, stored: StoredState
    ) -> StoredState:
        check_store(definition.name, id)
        check_text("instance id", stored.instance_id, MAX_INSTANCE_ID_LENGTH)
        connection = self.connection
        open_manual_transaction(connection)
        name = definition.name
        while True:
            with transaction.atomic(using=self.using), connection.cursor() as cursor:
                if portable.insert_store_row(cursor, connection, name, id, stored) is not None:
                    portable.insert_version(
                        cursor, connection, name, id, stored.instance_id, 0, "[]", None,
                        stored.encoded,
                    )  # fmt: skip
                    return stored
                existing = portable.read_locked(
                    cursor, queries.of(connection).read_store_row, name, id
                )
                if existing is not None:
                    return existing[1]
            # The conflicting row was deleted before we could read it: try again.

    # commits

    @contextmanager
    def commit_hook(self, hook: CommitHook) -> Iterator[None]:
        """Run ``hook`` in the transaction of every ``commit_mutation`` made in this
        context (this thread or task) on this client's database.

        The store operation itself (``update_store``, ``take_from_store``, ...) runs its
        user code outside any transaction as always; only the commit, the hook's statements
        included, is one transaction. Nests: the innermost hook applies."""
        token = current_hook.set((self.using, hook))
        try:
            yield
        finally:
            current_hook.reset(token)

    def commit_mutation(self, mutation: StoreMutation) -> CommitOutcome:
        self.commit_attempts += 1
        check_ledger_key(mutation.definition.name, mutation.id, mutation.step_id)
        check_text("instance id", mutation.expected.instance_id, MAX_INSTANCE_ID_LENGTH)
        open_manual_transaction(self.connection)
        with tracing.span(
            "yieldstar.store.commit", _commit_attributes(mutation.definition.name, mutation.id)
        ) as span:
            hooked = current_hook.get()
            if hooked is not None and hooked[0] == self.using:
                outcome, pending = self._commit_hooked(mutation, hooked[1])
            else:
                outcome, pending = self._commit(mutation, ())
            span.set("yieldstar.outcome", outcome.status)
            if outcome.status == "committed":
                span.set("yieldstar.store.version", mutation.expected.version + 1)
                tracing.committed_version.set(mutation.expected.version + 1)
                span.set("yieldstar.wakes", len(pending))
                self._finish(pending)
            elif outcome.status == "conflict":
                metrics.cas_retry(mutation.definition.name)
        return outcome

    def _publisher(self) -> functions.Publish | None:
        """How a commit publishes its wakes while it is acknowledged, or ``None`` (they go
        on commit): only in autocommit outside ``transaction.atomic`` (the batch commits
        the call), with an ``enqueues_only`` backend and ``PUBLISH_DURING_COMMIT`` on, and
        with no query logging or execute wrapper that the overlapped statements would
        bypass."""
        connection = self.connection
        if (
            self.in_transaction()
            or connection.queries_logged
            or connection.execute_wrappers
            or not yieldstar_settings.PUBLISH_DURING_COMMIT
            or not overlap.supported(connection)
        ):
            return None
        try:
            backend = yieldstar_settings.wake_backend
        except ImproperlyConfigured:
            return None  # reported when the wakes are handed over after the commit
        if not is_enqueue_only(backend):
            return None
        using = self.using
        return lambda pending: publish_during_commit(pending, using=using)

    def _commit(self, mutation: StoreMutation, unwait: Sequence[str]) -> Committed:
        if self._functions():
            return functions.commit_mutation(
                self.connection, mutation, unwait, publish=self._publisher()
            )
        return portable.commit_mutation(self.connection, self.using, mutation, unwait)

    def _commit_hooked(self, mutation: StoreMutation, hook: CommitHook) -> Committed:
        """The commit and ``hook``'s statements in one transaction (on PostgreSQL one
        function call for the commit and its ``unwait``, then the hook's work)."""
        work = hook.prepare(mutation)
        try:
            with transaction.atomic(using=self.using):
                outcome, pending = self._commit(mutation, hook.unwait)
                if outcome.status != "committed":
                    raise NotCommitted(outcome)
                work()
        except NotCommitted as not_committed:
            return not_committed.outcome, []
        return outcome, pending

    def commit_deletion(self, deletion: StoreDeletion) -> CommitOutcome:
        self.commit_attempts += 1
        check_ledger_key(deletion.definition.name, deletion.id, deletion.step_id)
        open_manual_transaction(self.connection)
        with tracing.span(
            "yieldstar.store.delete", _commit_attributes(deletion.definition.name, deletion.id)
        ) as span:
            hooked = current_hook.get()
            prepare = hooked[1].deletion if hooked is not None and hooked[0] == self.using else None
            if prepare is not None:
                outcome, pending = self._delete_hooked(deletion, prepare(deletion))
            else:
                outcome, pending = self._delete(deletion, publish=self._publisher())
            span.set("yieldstar.outcome", outcome.status)
            if outcome.status == "committed":
                span.set("yieldstar.wakes", len(pending))
                self._finish(pending)
            elif outcome.status == "conflict":
                metrics.cas_retry(deletion.definition.name)
        return outcome

    def _delete(
        self, deletion: StoreDeletion, *, publish: functions.Publish | None = None
    ) -> Committed:
        if self._functions():
            return functions.commit_deletion(self.connection, deletion, publish=publish)
        return portable.commit_deletion(self.connection, self.using, deletion)

    def _delete_hooked(self, deletion: StoreDeletion, work: Callable[[], None]) -> Committed:
        """The deletion and a hook's ``work`` in one transaction, the work only if the
        store was deleted (a conflict, a missing store or a recorded step rolls back)."""
        try:
            with transaction.atomic(using=self.using):
                outcome, pending = self._delete(deletion)
                if outcome.status != "committed":
                    raise NotCommitted(outcome)
                work()
        except NotCommitted as not_committed:
            return not_committed.outcome, []
        return outcome, pending

    def delete_store(self, definition: StoreDefinition, id: str) -> None:
        self.commit_deletion(StoreDeletion(definition, id, None, None, None))

    # waiters

    def register_waiter(
        self, waiter: StoreWaiter, *, fence: LeaseFence | None = None, unless_stale: bool = False
    ) -> bool:
        """Register ``waiter``, linearizably with every mutation of its store
        (:func:`.waiters.register_waiter`; in one call of a PL/pgSQL function where commits
        use them, :func:`.functions.register_waiter`); a stale or storeless waiter is woken
        on commit.

        With ``fence`` (a run's hold on its execution's lease), only while the run holds
        it, checked in the registration's transaction before it writes anything (no
        statement more on PostgreSQL): otherwise nothing is registered and
        ``LeaseNotHeld`` is raised.

        With ``unless_stale`` (a run that holds its lease), an observation the store moved
        past registers nothing and ``False`` is returned: take again, rather than be woken
        through the broker to do so. ``True``: registered."""
        waiter_rows.checked_paths(waiter)
        open_manual_transaction(self.connection)
        if self._functions():
            done = functions.register_waiter(self.connection, waiter, fence, unless_stale)
        else:
            done = waiter_rows.register_waiter(
                self.connection, self.using, waiter, fence, unless_stale
            )
        if done is None:
            raise LeaseNotHeld(waiter.execution_id)
        self._finish(done.pending)
        return done.registered

    def remove_waiters(self, execution_id: str, step_key: str | None = None) -> None:
        """Delete the waiters of an execution, or of one of its steps
        (:func:`.waiters.remove_waiters`); a woken waiter of a cohort hands its wake to the
        next of its cohort, delivered on commit."""
        check_removal(execution_id, step_key)
        open_manual_transaction(self.connection)
        pending = waiter_rows.remove_waiters(self.connection, self.using, execution_id, step_key)
        self._finish(pending)

    def waiters(self, definition: StoreDefinition, id: str) -> list[StoreWaiter]:
        """The waiters registered on a store, in registration order."""
        return waiter_rows.list_waiters(self.connection, definition.name, id)


#: The bytes of a piece of a state :func:`read_pieces` reads (1 MiB).
READ_PIECE_BYTES = 1 << 20


def read_pieces(connection: BaseDatabaseWrapper, name: str, id: str) -> StoredState | None:
    """``read_store``'s row on PostgreSQL. A state of at most ``READ_PIECE_BYTES`` bytes is
    read whole, in one statement as before; a longer one is read again with its row, as
    UTF-8 in pieces of that many bytes, a row each, in one statement (so one snapshot),
    joined and decoded here: libpq's input buffer, which grows to hold the largest message
    it read (doubling) and stays so for the life of the connection, then holds one piece,
    not a whole state; the result holding the pieces is freed before they are joined."""
    piece = READ_PIECE_BYTES
    row = fetchone(connection, queries.of(connection).read_store_short, [piece, name, id])
    if row is None:
        return None
    if row[2] is not None:
        return StoredState(row[0], int(row[1]), row[2])
    rows = fetchall(
        connection,
        queries.of(connection).read_store_pieces,
        [piece, piece, piece, name, id],
        binary=True,
    )
    if not rows:  # deleted since
        return None
    instance_id, version = rows[0][0], int(rows[0][1])
    rows.sort(key=lambda row: int(row[2]))
    pieces = [row[3] for row in rows]
    del rows
    return StoredState(instance_id, version, b"".join(pieces).decode())


_clients: dict[str, DatabaseStoreClient] = {}
_clients_lock = threading.Lock()


def _commit_attributes(store: str, id: str) -> dict[str, str | int | float | bool] | None:
    """The attributes a commit's span starts with (``None`` with tracing off)."""
    if not tracing.enabled():
        return None
    return {"yieldstar.store": store, "yieldstar.store.id": id}


def get_store_client(using: str | None = None) -> DatabaseStoreClient:
    """The store client of a database alias, ``DATABASE_ALIAS`` by default (one per alias,
    shared by threads: it keeps no connection, Django's connections are per thread)."""
    using = database_alias(using)
    client = _clients.get(using)
    if client is None:
        with _clients_lock:
            client = _clients.setdefault(using, DatabaseStoreClient(using))
    return client


def in_callers_transaction(connection: BaseDatabaseWrapper) -> bool:
    """Whether a statement run now on ``connection`` joins a transaction of the caller's:
    ``transaction.atomic``, or autocommit off (``set_autocommit(False)``, ``AUTOCOMMIT:
    False``), in a transaction outside any ``atomic`` block."""
    return connection.in_atomic_block or not connection.get_autocommit()
