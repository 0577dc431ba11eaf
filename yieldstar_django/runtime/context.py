"""The step contract: what a step kind is, and the one object it talks to the engine through.

A step kind is a :class:`Kind`: its name (``StepCall.kind``, the heap row's ``kind``) and
``execute(ctx)``, which runs a step of it that the heap holds no outcome for (none yet, or
a ``pending`` row of an earlier run) and returns its ``StepValue`` or ``StepError``. The
engine does the rest, alike for every kind (``runtime/engine.py``): it finds the step's key
(``key=`` or the next index), refuses a key used twice, raises ``NonDeterminismError`` for
a recorded row of another kind or fingerprint, answers a recorded step from its row
(``Kind.replay`` for a completed one, the recorded error for a failed one) without calling
``execute``, and settles what ``execute`` raises (:func:`run_step`, the one place that
does):

- ``Suspend`` ends the run, suspended (the execution waits for a wake or a timer);
- ``LET_THROUGH`` (the lease lost, a database error, the worker's own stops) ends the run
  with nothing recorded; the execution runs again later;
- ``StoreContentionError`` (a store call reached ``CAS_MAX_ATTEMPTS``) suspends the
  execution to run the step again ``CONTENTION_RETRY_SECONDS`` later
  (:meth:`StepContext.contended`);
- any other ``Exception`` is recorded once as the step's error, with the waiters of its
  earlier runs removed (:meth:`StepContext.fail`), and thrown into the workflow.

``execute`` records through its :class:`StepContext` only: every heap write is fenced by
the run's lease (``LeaseLost`` when it is not written). User code (a ``step.run``
function, a selector, a claim, an updater) never runs inside a transaction of the
runtime's, but a ``step.atomic`` function, which runs in the transaction of its own heap
row (``runtime/atomic_steps.py``); a row that must commit with a store change is handed to
the store commit (:meth:`StepContext.commit_hook`). See
``docs/internals/architecture.md#adding-a-step-kind``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, NoReturn

from django.db import DatabaseError, connections, transaction

from .. import clock
from ..conf import yieldstar_settings
from ..connector import CommitHook, DatabaseStoreClient, LeaseNotHeld, cursors
from ..connector.hooks import KnownReads
from ..core.commits import StoreDeletion, StoreMutation
from ..core.durable import DurableLimits, decode_durable
from ..core.errors import StoreContentionError
from ..core.results import StoreWaiter
from ..core.store import StoreClient
from ..models.runtime import Execution, ExecutionStatus, ExecutionStep, StepStatus
from ..observability import metrics
from . import timers
from .leases import Lease, LeaseLost
from .outcomes import (
    NOT_RECORDED,
    StepError,
    StepResult,
    Suspend,
    durable_limits,
    encode_error,
    record_limits,
)
from .statements import fenced_insert_sql, fenced_update_sql, field, set_clause

if TYPE_CHECKING:
    from django.db.transaction import Atomic

    from .steps import StepCall

__all__ = [
    "CONTENTION_RETRY_SECONDS",
    "LET_THROUGH",
    "Kind",
    "RunState",
    "StepContext",
    "recorded_value",
    "run_step",
]

#: Seconds before a step that lost a compare-and-swap race too often is tried again.
CONTENTION_RETRY_SECONDS: Final = 1.0

#: What a step lets through unrecorded: the end of its run's lease, a database error (the
#: run ends, the execution resumes later), the worker's own stops, and a suspension.
LET_THROUGH: Final[tuple[type[BaseException], ...]] = (
    Suspend,
    LeaseLost,
    DatabaseError,
    *NOT_RECORDED,
)

#: ``(store name, store id, ledger step key)``: an entry of the applied-steps ledger.
LedgerKey = tuple[str, str, str]


def recorded_value(ctx: StepContext) -> Any:
    """The default ``Kind.replay``: the recorded row's value (``""``: ``None``)."""
    assert ctx.row is not None
    return decode_durable(ctx.row.value_json) if ctx.row.value_json else None


@dataclass(frozen=True)
class Kind:
    """A step kind: how the engine runs, replays and keys the steps of ``name``.

    ``execute(ctx)`` runs a step with no recorded outcome (see the module doc).
    ``replay(ctx)`` is the value of a completed row (``ctx.row``) as the workflow sees it.
    ``ledger_keys(call, key)`` are the ledger entries the step uses (a step of the run
    that uses one too is refused with ``StepKeyError``). ``waiters(call, key)`` are the
    waiter keys a step of the kind registers, if it registers any. ``indexed`` is False
    for a kind that takes no step index (its key is always given). ``reused`` is the
    ``StepKeyError`` message for a key used twice (``{key}``, ``{fingerprint}``,
    ``{execution}``).
    """

    name: str
    execute: Callable[[StepContext], StepResult]
    replay: Callable[[StepContext], Any] = recorded_value
    ledger_keys: Callable[[StepCall, str], Sequence[LedgerKey]] | None = None
    waiters: Callable[[StepCall, str], tuple[str, ...]] | None = None
    indexed: bool = True
    reused: str = (
        "step key {key!r} is used twice in execution {execution!r}; give each step a unique key="
    )


def run_step(ctx: StepContext) -> StepResult:
    """Run ``ctx``'s step with its kind's ``execute`` and settle what that raises: the one
    end-of-step error handling of every kind (see the module doc)."""
    try:
        return ctx.kind.execute(ctx)
    except LET_THROUGH:
        raise
    except StoreContentionError as exc:
        metrics.contention_error(exc.store_name)
        ctx.contended()
    except Exception as exc:
        return ctx.fail(exc)


class RunState:
    """What the steps of one run share: its lease, its store client, the heap as the run
    found it, the keys it reached, and the fenced heap writes. Made by the engine; a step
    kind uses its :class:`StepContext`."""

    def __init__(self, lease: Lease, client: StoreClient) -> None:
        self.lease = lease
        self.execution: Execution = lease.execution
        self.client = client
        self.alias: str = yieldstar_settings.DATABASE_ALIAS
        self.limits = durable_limits()
        #: ``limits`` with room for the wrapper of a store step's record (``record_limits``).
        self.record_limits = record_limits(self.limits)
        rows = lease.take_heap()
        if rows is None:
            rows = list(ExecutionStep.objects.filter(execution_id=self.execution.id))
        #: The heap as the run found it, by step key.
        self.heap: dict[str, ExecutionStep] = {row.step_key: row for row in rows}
        #: The stores its waiters are on, read with the lease: the first read of each
        #: woken step (handed to the store commits with the steps' ``CommitHook``).
        self.reads: KnownReads | None = lease.take_reads()
        #: The step keys the run reached so far.
        self.used: set[str] = set()
        #: When the step the run executes now began (the timers' clock): the
        #: ``created_at`` of the heap row it inserts, so the row tells how long it took.
        self.step_started: datetime | None = None
        #: The store client if its commits can take the heap's rows (the database client
        #: on the heap's database), else ``None``.
        self.heap_client = (
            client
            if isinstance(client, DatabaseStoreClient) and client.using == self.alias
            else None
        )

    def write(
        self,
        call: StepCall,
        key: str,
        position: int,
        row: ExecutionStep | None,
        *,
        status: str,
        attempts: int | None = None,
        value_json: str = "",
        error_json: str = "",
        wake_at: datetime | None = None,
        now: datetime | None = None,
    ) -> None:
        """Record a step outcome, fenced by the lease. Raises ``LeaseLost`` if not written.

        Inserts the heap row, or moves an existing ``pending`` row on (only if no one else
        did: the update is conditional on its ``attempts``).
        """
        now = now or clock.now()
        recorded_at = now if status != StepStatus.PENDING else None
        if row is None:
            values: dict[str, Any] = {
                "execution": self.execution.id,
                "step_key": key,
                "position": position,
                "kind": call.kind,
                "fingerprint": call.fingerprint,
                "status": status,
                "attempts": attempts if attempts is not None else 1,
                "created_at": self.step_started or now,
                "value_json": value_json,
                "error_json": error_json,
                "wake_at": wake_at,
                "recorded_at": recorded_at,
            }
            self._fenced_insert(values)
            return
        changes: dict[str, Any] = {
            "status": status,
            "value_json": value_json,
            "recorded_at": recorded_at,
        }
        if error_json or status != StepStatus.PENDING:
            changes["error_json"] = error_json
        if attempts is not None:
            changes["attempts"] = attempts
        if wake_at is not None:
            changes["wake_at"] = wake_at
        self._fenced_update(row, changes)

    def _fenced_update(self, row: ExecutionStep, changes: dict[str, Any]) -> None:
        """``UPDATE`` a pending heap row if nobody moved it on and the lease is ours."""
        connection = connections[self.alias]
        assignments, params = set_clause(ExecutionStep, changes, connection)
        params += [row.pk, StepStatus.PENDING.value, row.attempts, *self.lease.fence(connection)[1]]
        if cursors.execute(connection, fenced_update_sql(connection, assignments), params) != 1:
            raise LeaseLost(self.execution.id)

    def _fenced_insert(self, values: dict[str, Any]) -> None:
        """``INSERT ... SELECT ... WHERE EXISTS (the lease is ours)`` in one statement."""
        connection = connections[self.alias]
        names = list(values)
        params = [
            field(ExecutionStep, name).get_db_prep_save(value, connection=connection)
            for name, value in values.items()
        ]
        params += self.lease.fence(connection)[1]
        if cursors.execute(connection, fenced_insert_sql(connection, names), params) != 1:
            # The lease is gone, or another run recorded this step first (and so holds
            # the lease now): this run records nothing more.
            raise LeaseLost(self.execution.id)


class StepContext:
    """One step of one run, as its kind sees it: the step, its heap row, and every way
    the step may record or wait. Every write is fenced by the run's lease and raises
    ``LeaseLost`` (let through: the run ends) when the lease is no longer the run's.

    ``call`` is the step as the workflow asked for it, ``key`` its step key, ``position``
    its index in the run, ``row`` its heap row: ``None`` on its first run, else the
    ``pending`` row an earlier run wrote (``attempts``, ``wake_at``).
    """

    __slots__ = ("_run", "call", "key", "kind", "position", "row")

    def __init__(
        self,
        run: RunState,
        kind: Kind,
        call: StepCall,
        key: str,
        position: int,
        row: ExecutionStep | None,
    ) -> None:
        self._run = run
        self.kind = kind
        self.call = call
        self.key = key
        self.position = position
        self.row = row

    # -- what the step runs with ----------------------------------------------------------

    @property
    def execution(self) -> Execution:
        """The execution's row, as the run's lease read it."""
        return self._run.execution

    @property
    def execution_id(self) -> str:
        return self._run.execution.id

    @property
    def client(self) -> StoreClient:
        """The store client of the run; a store call with ``StoreStepId(execution_id,
        key)`` applies once, however often the step runs."""
        return self._run.client

    @property
    def alias(self) -> str:
        """The database alias of the heap (``DATABASE_ALIAS``)."""
        return self._run.alias

    @property
    def limits(self) -> DurableLimits:
        """The durable-value limits a step's result is encoded with."""
        return self._run.limits

    @property
    def record_limits(self) -> DurableLimits:
        """``limits`` with room for a store step's record around a store's state."""
        return self._run.record_limits

    def heap_client(self) -> DatabaseStoreClient | None:
        """The store client if its commits join the heap's transactions (the database
        client on the heap's database; its commits take a hook, its registrations the
        lease's fence), else ``None`` (in memory, or another database)."""
        return self._run.heap_client

    def atomic(self) -> Atomic:
        """A transaction (a savepoint inside one) on the heap's database: what the step
        writes in it commits together."""
        return transaction.atomic(using=self._run.alias)

    def unreplayed(self) -> Iterator[ExecutionStep]:
        """The heap rows of steps the run has not reached yet (recorded by earlier runs)."""
        used = self._run.used
        return (row for key, row in self._run.heap.items() if key not in used)

    # -- recording ------------------------------------------------------------------------

    def record(
        self,
        value_json: str = "",
        *,
        attempts: int | None = None,
        wake_at: datetime | None = None,
        now: datetime | None = None,
    ) -> None:
        """Record the step ``completed`` with ``value_json`` (the durable text its replays
        decode), in the current transaction (autocommit outside one). ``now`` is the row's
        ``recorded_at`` (the timers' clock by default), ``wake_at`` a time the kind keeps
        with it. Raises ``LeaseLost`` if not written: the lease is gone, or another run
        recorded the step first."""
        self._run.write(
            self.call,
            self.key,
            self.position,
            self.row,
            status=StepStatus.COMPLETED,
            attempts=attempts,
            value_json=value_json,
            wake_at=wake_at,
            now=now,
        )

    def pend(
        self,
        *,
        attempts: int | None = None,
        error_json: str = "",
        wake_at: datetime | None = None,
        now: datetime | None = None,
    ) -> None:
        """Record the step ``pending`` (a first run's row, or an earlier run's moved on):
        it runs again at a later wake. ``wake_at`` is when it is due (a timer the kind arms
        with :meth:`timer`, in the same transaction). Raises ``LeaseLost`` if not written."""
        self._run.write(
            self.call,
            self.key,
            self.position,
            self.row,
            status=StepStatus.PENDING,
            attempts=attempts,
            error_json=error_json,
            wake_at=wake_at,
            now=now,
        )

    def fail(self, exc: BaseException, *, attempts: int = 1) -> StepError:
        """Record ``exc`` as the step's error (``failed``, ``attempts`` made) and remove
        the waiters its earlier runs registered, in one transaction; returns the
        ``StepError`` to throw into the workflow. Raises ``LeaseLost`` if not written, and
        ``WorkerShuttingDown`` instead of recording while the worker shuts down cold."""
        error_json = encode_error(exc)
        waiters = self.own_waiters()
        with self.atomic() if waiters else nullcontext():
            self._run.write(
                self.call,
                self.key,
                self.position,
                self.row,
                status=StepStatus.FAILED,
                attempts=attempts,
                error_json=error_json,
            )
            self._remove_waiters(waiters)
        return StepError(exc)

    def contended(self) -> NoReturn:
        """Suspend the execution (``retrying``) to run the step again
        ``CONTENTION_RETRY_SECONDS`` from now, on a durable timer: a store call that lost
        ``CAS_MAX_ATTEMPTS`` races, and committed nothing. Raises ``Suspend``."""
        wake_at = clock.now() + timedelta(seconds=CONTENTION_RETRY_SECONDS)
        self.timer(wake_at, "contention")
        raise Suspend(ExecutionStatus.RETRYING, self.key, wake_at)

    def timer(self, at: datetime, reason: str) -> None:
        """Arm a durable timer that runs the execution at ``at``, in the current
        transaction, unless one of ``reason`` is pending for that time already. A run
        woken early waits again with the timer it has (the lease acknowledged only intents
        due by then), made deliverable at ``at`` again if that early delivery pushed it
        past (a relay whose clock is ahead), and re-arms one that was acknowledged anyway
        (fired early by another clock)."""
        execution = self._run.execution
        timers.ensure_timer(execution.id, execution.workflow_id, at, reason=reason)

    # -- waiting on stores ----------------------------------------------------------------

    def register_waiter(self, waiter: StoreWaiter, *, unless_stale: bool = False) -> bool:
        """Register ``waiter`` (one of this execution's, keyed by one of the kind's
        ``waiters``); it replaces the waiter of the same key and store. ``False``: made
        ``unless_stale`` on the heap's database, the store had moved since the observation
        and nothing was registered (the step looks again in this run); elsewhere the
        registration is made and woken at once if stale.

        On the heap's database the registration is fenced by the lease, as the heap
        writes are, in the registration's transaction (the current one, if any): a run
        whose lease was taken over while the step ran registers nothing and raises
        ``LeaseLost``. A client elsewhere (in memory, another database) registers
        unfenced; a run that lost its lease then removes the waiters of an execution that
        finished meanwhile (``run_execution``)."""
        client = self._run.heap_client
        if client is None:
            self._run.client.register_waiter(waiter)
            return True
        try:
            fence = self._run.lease.waiter_fence()
            return client.register_waiter(waiter, fence=fence, unless_stale=unless_stale)
        except LeaseNotHeld:
            raise LeaseLost(self._run.execution.id) from None

    def own_waiters(self) -> tuple[str, ...]:
        """The waiter keys the step's earlier runs registered (none on its first run, nor
        for a kind without ``waiters``)."""
        waiters = self.kind.waiters
        if self.row is None or waiters is None:
            return ()
        return waiters(self.call, self.key)

    def drop_waiters(self) -> None:
        """Remove the waiters the step's earlier runs registered (``own_waiters``), in the
        current transaction."""
        self._remove_waiters(self.own_waiters())

    def _remove_waiters(self, keys: tuple[str, ...]) -> None:
        for key in keys:
            self._run.client.remove_waiters(self._run.execution.id, key)

    def commit_hook(
        self, prepare: Callable[[StoreMutation], Callable[[], None]]
    ) -> AbstractContextManager[None]:
        """A context in which the store client's commits run the step's own database work
        (``prepare(mutation)`` before each commit, what it returns inside it: a heap row,
        say) in the commit's transaction, so both commit or neither; a commit also removes
        the step's ``own_waiters`` and starts from the stores the lease read ahead. Under a
        client that cannot (``heap_client()`` is ``None``) the store commits alone, nothing
        runs, and the step records its row after (a replay finds the change in the
        ledger)."""
        client = self._run.heap_client
        if client is None:
            return nullcontext()
        reads = self._run.reads if self.kind.waiters is not None else None
        return client.commit_hook(CommitHook(prepare, self.own_waiters(), reads))

    def deletion_hook(
        self, prepare: Callable[[StoreDeletion], Callable[[], None]]
    ) -> AbstractContextManager[None]:
        """``commit_hook`` for store deletions: a context in which the store client's
        deletions run the step's own database work (``prepare(deletion)`` before each,
        what it returns inside it) in the deletion's transaction, only if the store was
        deleted. Under a client that cannot (``heap_client()`` is ``None``) the deletion
        commits alone and the step records its row after (a replay finds it in the
        ledger). A store mutation made in the context commits alone."""
        client = self._run.heap_client
        if client is None:
            return nullcontext()
        return client.commit_hook(CommitHook(_alone, deletion=prepare))


def _alone(mutation: StoreMutation) -> Callable[[], None]:
    """The ``prepare`` of a hook whose mutations commit with no work of the step's."""
    return _nothing


def _nothing() -> None:
    pass
