"""The replay engine: one run of an execution under a held lease.

A run calls the workflow function from the top. Each ``StepCall`` it yields is looked up
in the heap by step key: a recorded result is sent back (a recorded error thrown in)
without running anything; a missing or pending step is executed and its outcome recorded
before the workflow sees it. A step that cannot finish now (a take with no match, a sleep
not yet due, a retry not yet due) suspends the run: the generator is closed, and a waiter
or a durable timer resumes the execution later.

Heap writes are fenced by the lease: a row is inserted only while this run still holds
the lease of a live execution, in the same statement, so a run that lost its lease (or
whose execution was cancelled) records nothing more.

User code never runs inside a database transaction of the runtime's. A run inside a
transaction of the caller's (a ``TestCase``, or ``run_execution`` in a
``transaction.atomic``) runs each ``step.run`` function in a savepoint
(:func:`step_savepoints`), so a database error of the function fails the step, as in a
worker, instead of leaving the caller's transaction unusable. A store step's updater, selector and
claim (and the store's ``initial`` and schema) run in the store client's read/compute/CAS
loop; the step's heap row is handed to the store commit as a
:class:`~yieldstar_django.connector.CommitHook`, so the row and the store's change (with
its ledger entry) commit together or not at all. The unique (execution, step key)
constraint means a step has at most one recorded outcome, whoever records it first.
"""

from __future__ import annotations

import inspect
import logging
import reprlib
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar
from datetime import datetime, timedelta
from typing import Any, Final, NoReturn

from django.db import connections, transaction

from .. import clock
from ..conf import yieldstar_settings
from ..connector.client import in_callers_transaction
from ..connector.cursors import execute
from ..core.durable import decode_durable, encode_durable
from ..core.errors import WorkflowValueError
from ..core.store import StoreClient
from ..models.runtime import (
    ExecutionStatus,
    ExecutionStep,
    StepKind,
    StepStatus,
)
from . import claim_leases, patches, store_steps, take_any, timers
from .errors import (
    NonDeterminismError,
    RetryableError,
    StepKeyError,
    error_from_record,
)
from .leases import Lease, LeaseLost
from .outcomes import (
    NOT_RECORDED,
    RunOutcome,
    StepError,
    StepResult,
    StepValue,
    Suspend,
    completed,
    durable_limits,
    encode_error,
    failed,
    record_limits,
)
from .registry import Workflow
from .statements import fenced_insert_sql, fenced_update_sql, field, set_clause
from .steps import Step, StepCall

logger = logging.getLogger("yieldstar_django.runtime")

__all__ = ["Engine", "RunCutOff", "RunOutcome", "durable_limits", "encode_error", "run_deadline"]

#: Seconds before a step that lost a compare-and-swap race too often is tried again.
CONTENTION_RETRY_SECONDS: Final = 1.0
#: A ``time.monotonic()`` time past which a run stops before its next step (``RunCutOff``).
#: Set by ``yieldstar_django.testing`` around the runs it makes, so its time limit holds
#: for a run that goes on from step to step without suspending; never in production.
run_deadline: ContextVar[float | None] = ContextVar("yieldstar_run_deadline", default=None)


class RunCutOff(Exception):
    """A run stopped between two steps because ``run_deadline`` passed. What it recorded
    stays recorded; ``run_execution`` lets the lease go with a run requested at once (the
    execution stays due) and raises it on."""


class Engine:
    """Replays one execution once. Create one per run; ``run()`` returns how it ended.

    ``LeaseLost`` propagates (nothing more may be recorded); so do ``RunCutOff`` and any
    error of the runtime itself (a database error, say), which leave the execution for a
    later run.
    """

    def __init__(self, workflow: Workflow[Any, Any], lease: Lease, client: StoreClient) -> None:
        self.workflow = workflow
        self.lease = lease
        self.execution = lease.execution
        self.client = client
        self.limits = durable_limits()
        #: ``limits`` with room for the wrapper of a store step's record (``record_limits``).
        self.record_limits = record_limits(self.limits)
        self.alias = yieldstar_settings.DATABASE_ALIAS
        rows = lease.take_heap()
        if rows is None:
            rows = list(ExecutionStep.objects.filter(execution_id=self.execution.id))
        self.heap: dict[str, ExecutionStep] = {row.step_key: row for row in rows}
        #: The stores its waiters are on, read with the lease: the first read of each
        #: woken step (handed to the store commits with the steps' ``CommitHook``).
        self.reads = lease.take_reads()
        self.used: set[str] = set()
        #: The ledger (and waiter) keys this run's store steps use, by store: each names
        #: the step key that uses it (see ``_reserve``).
        self.ledger_keys: dict[tuple[str, str, str], str] = {}
        self.position = 0
        #: Keys of takes with a registered waiter whose result is not recorded yet.
        self.open_takes: set[str] = {
            key
            for key, row in self.heap.items()
            if row.kind in (StepKind.TAKE, StepKind.TAKE_ANY, StepKind.TAKE_LEASE)
            and row.status == StepStatus.PENDING
        }

    # -- the run loop ---------------------------------------------------------------------

    def run(self) -> RunOutcome:
        """Run the workflow from the top until it returns, raises or suspends."""
        step = Step(self.execution.id, self.execution.workflow_id)
        try:
            inputs = decode_durable(self.execution.input_json)
            gen = self.workflow.fn(step, *inputs["args"], **inputs["kwargs"])
        except NOT_RECORDED:
            raise
        except Exception as exc:
            return failed(exc)
        if not inspect.isgenerator(gen):
            return failed(TypeError(f"workflow {self.workflow.name!r} did not return a generator"))
        send: Any = None
        throw: BaseException | None = None
        while True:
            self.lease.check()
            deadline = run_deadline.get()
            if deadline is not None and time.monotonic() > deadline:
                _close(gen)
                raise RunCutOff(self.execution.id)
            try:
                call = gen.send(send) if throw is None else gen.throw(throw)
            except StopIteration as stop:
                return self._complete(step, stop.value)
            except NOT_RECORDED as exc:
                if exc is not throw:
                    raise
                # A step's recorded error (an earlier version recorded a worker's stop),
                # replayed and not caught: the workflow's failure, not this run's stop.
                return failed(exc)
            except BaseException as exc:
                return failed(exc)
            send, throw = None, None
            if not isinstance(call, StepCall):
                _close(gen)
                return failed(
                    TypeError(
                        # reprlib: short, and never raises (a repr() that raises would
                        # crash the run, leaving the execution running)
                        f"workflow {self.workflow.name!r} yielded {reprlib.repr(call)}; use "
                        "the step primitives as `result = yield from step.run(...)`"
                    )
                )
            try:
                result = self._execute(call)
            except Suspend as suspend:
                _close(gen)
                return suspend.outcome
            except (NonDeterminismError, StepKeyError) as exc:
                _close(gen)
                return failed(exc)
            except BaseException:
                _close(gen)
                raise
            if isinstance(result, StepError):
                throw = result.error
            else:
                send = result.value

    def _complete(self, step: Step, value: Any) -> RunOutcome:
        unused = step.unused_steps()
        if unused:
            # ``step.update(...)`` without ``yield from`` makes a step and runs nothing.
            names = ", ".join(f"{name}()" for name in unused)
            return failed(
                TypeError(
                    f"workflow {self.workflow.name!r} returned with steps it made and never "
                    f"ran: {names}; a step runs at its `yield from` "
                    f"(`result = yield from {unused[0]}(...)`)"
                )
            )
        try:
            encoded = encode_durable(
                value,
                limits=self.limits,
                label=f'The result of workflow "{self.workflow.name}"',
            )
        except WorkflowValueError as exc:
            return failed(exc)
        return completed(encoded)

    # -- dispatch -------------------------------------------------------------------------

    def _execute(self, call: StepCall) -> StepResult:
        if call.kind == StepKind.PATCH:  # no step index: see runtime/patches.py
            return StepValue(patches.decide(self, call))
        key = call.key if call.key is not None else str(self.position)
        position = self.position
        self.position += 1
        if key in self.used:
            raise StepKeyError(
                f"step key {key!r} is used twice in execution {self.execution.id!r}; "
                "give each step a unique key="
            )
        self.used.add(key)
        self._reserve(call, key)
        row = self.heap.get(key)
        if row is not None:
            if row.kind != call.kind or not call.matches(row.fingerprint):
                raise NonDeterminismError.at(
                    self.execution.id,
                    key,
                    recorded=(row.kind, row.fingerprint),
                    replayed=(call.kind, call.fingerprint),
                )
            if row.status == StepStatus.COMPLETED:
                if call.kind == StepKind.TAKE_LEASE:
                    return StepValue(claim_leases.replayed(self, call, key, row))
                if call.kind == StepKind.TAKE_ANY:
                    return StepValue(take_any.revive(row.value_json))
                return StepValue(store_steps.revive(call.kind, row.value_json))
            if row.status == StepStatus.FAILED:
                return StepError(error_from_record(decode_durable(row.error_json)))
        executor = _EXECUTORS.get(call.kind)
        if executor is None:  # pragma: no cover
            raise TypeError(f"unknown step kind {call.kind!r}")
        result = executor(self, call, key, position, row)
        if isinstance(result, StepError):
            # The workflow sees the error as recorded, as every replay will (its class
            # found again, its durable attributes): the live exception may be of a class
            # that cannot be imported, or carry attributes that were not recorded, and a
            # first run that caught it must not take a branch its replays do not.
            return StepError(error_from_record(decode_durable(encode_error(result.error))))
        return result

    def _reserve(self, call: StepCall, key: str) -> None:
        """Note the ledger keys a store step uses; raise ``StepKeyError`` if another step
        of the run uses one on the same store.

        ``take`` and ``update`` use their step key, a leased take also ``<key>:release``
        (its hand-back), and choice ``i`` of a ``take_any`` ``<key>#<i>``: a step keyed
        like one of those would read the other's ledger entry back as its own result.
        """
        if call.kind == StepKind.TAKE_ANY:
            uses = [
                (definition.name, store_id, take_any.choice_key(key, index))
                for index, (definition, store_id, _, _) in enumerate(call.choices)
            ]
        elif call.kind in (StepKind.TAKE, StepKind.TAKE_LEASE, StepKind.UPDATE):
            assert call.definition is not None
            name, store_id = call.definition.name, call.store_id
            uses = [(name, store_id, key)]
            if call.kind == StepKind.TAKE_LEASE:
                uses.append((name, store_id, claim_leases.release_key(key)))
        else:
            return
        for use in uses:
            other = self.ledger_keys.setdefault(use, key)
            if other != key:
                raise StepKeyError(
                    f"step {key!r} of execution {self.execution.id!r} would use the ledger "
                    f"key {use[2]!r} of store {use[0]}/{use[1]}, which step {other!r} uses; "
                    "give it another key="
                )

    # -- primitives -----------------------------------------------------------------------

    def _run(
        self, call: StepCall, key: str, position: int, row: ExecutionStep | None
    ) -> StepResult:
        now = clock.now()
        if row is not None and row.wake_at is not None and row.wake_at > now:
            self._timer(row.wake_at, "retry")
            raise Suspend(ExecutionStatus.RETRYING, key, row.wake_at)
        attempts = (row.attempts if row is not None else 0) + 1
        assert call.fn is not None
        try:
            with step_savepoints():
                value = call.fn(*call.args, **call.kwargs)
            if inspect.isawaitable(value) or inspect.isgenerator(value):
                close = getattr(value, "close", None)
                if close is not None:
                    close()
                raise TypeError(
                    f"step.run() needs a plain function; {call.fingerprint} returned "
                    f"{type(value).__name__}"
                )
            encoded = encode_durable(
                value, limits=self.limits, step_key=key, label=f"The result of step {key!r}"
            )
        except NOT_RECORDED:
            raise
        except RetryableError as exc:
            if attempts < exc.max_attempts:
                wake_at = clock.now() + timedelta(seconds=exc.delay_after(attempts))
                with transaction.atomic(using=self.alias):
                    self._write(
                        call,
                        key,
                        position,
                        row,
                        status=StepStatus.PENDING,
                        attempts=attempts,
                        error_json=encode_error(exc),
                        wake_at=wake_at,
                    )
                    self._timer(wake_at, "retry")
                raise Suspend(ExecutionStatus.RETRYING, key, wake_at) from None
            final = exc.final_error()
            self._record_error(call, key, position, row, final, attempts)
            return StepError(final)
        except BaseException as exc:
            self._record_error(call, key, position, row, exc, attempts)
            return StepError(exc)
        self._write(
            call,
            key,
            position,
            row,
            status=StepStatus.COMPLETED,
            attempts=attempts,
            value_json=encoded,
        )
        return StepValue(decode_durable(encoded))

    def _sleep(
        self, call: StepCall, key: str, position: int, row: ExecutionStep | None
    ) -> StepResult:
        now = clock.now()
        if row is None:
            if call.seconds <= 0:
                self._write(
                    call, key, position, None, status=StepStatus.COMPLETED, wake_at=now, now=now
                )
                return StepValue(None)
            wake_at = now + timedelta(seconds=call.seconds)
            with transaction.atomic(using=self.alias):
                self._write(
                    call, key, position, None, status=StepStatus.PENDING, wake_at=wake_at, now=now
                )
                self._timer(wake_at, "sleep")
            raise Suspend(ExecutionStatus.SLEEPING, key, wake_at)
        assert row.wake_at is not None
        if now < row.wake_at:
            self._timer(row.wake_at, "sleep")
            raise Suspend(ExecutionStatus.SLEEPING, key, row.wake_at)
        self._write(call, key, position, row, status=StepStatus.COMPLETED)
        return StepValue(None)

    # -- recording ------------------------------------------------------------------------

    def _contended(self, key: str) -> NoReturn:
        wake_at = clock.now() + timedelta(seconds=CONTENTION_RETRY_SECONDS)
        self._timer(wake_at, "contention")
        raise Suspend(ExecutionStatus.RETRYING, key, wake_at)

    def _timer(self, at: datetime, reason: str) -> None:
        """Schedule a durable timer at ``at``, unless one of ``reason`` is pending for that
        time already. A run woken early waits again with the timer it has (the lease
        acknowledged only intents due by then), made deliverable at ``at`` again if that
        early delivery pushed it past (a relay whose clock is ahead), and re-arms one that
        was acknowledged anyway (fired early by another clock); before, each such run
        wrote a new one."""
        timers.ensure_timer(self.execution.id, self.execution.workflow_id, at, reason=reason)

    def _record_error(
        self,
        call: StepCall,
        key: str,
        position: int,
        row: ExecutionStep | None,
        exc: BaseException,
        attempts: int,
    ) -> None:
        self._write(
            call,
            key,
            position,
            row,
            status=StepStatus.FAILED,
            attempts=attempts,
            error_json=encode_error(exc),
        )

    def _write(
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
                "created_at": now,
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
        if execute(connection, fenced_update_sql(connection, assignments), params) != 1:
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
        if execute(connection, fenced_insert_sql(connection, names), params) != 1:
            # The lease is gone, or another run recorded this step first (and so holds
            # the lease now): this run records nothing more.
            raise LeaseLost(self.execution.id)


#: How a step of each kind runs when the heap has no outcome for it.
_EXECUTORS: dict[str, Callable[[Engine, StepCall, str, int, ExecutionStep | None], StepResult]] = {
    StepKind.RUN: Engine._run,
    StepKind.SLEEP: Engine._sleep,
    StepKind.TAKE: store_steps.take,
    StepKind.UPDATE: store_steps.update,
    StepKind.GET: store_steps.get,
    StepKind.TAKE_LEASE: claim_leases.take,
    StepKind.END_LEASE: claim_leases.end,
    StepKind.TAKE_ANY: take_any.execute,
}


@contextmanager
def step_savepoints() -> Iterator[None]:
    """A savepoint on each connection of this thread that is in a transaction (an
    ``atomic`` block, a ``TestCase``'s included, or autocommit off), for a ``step.run``
    function: an error rolls back what it wrote there and leaves the transaction usable
    (the step fails, as in a worker, whose connections are in autocommit), and its
    ``on_commit`` hooks go with it. Nothing in autocommit mode. A ``durable`` block in the
    function is allowed where it was without the savepoint (in a ``TestCase``, say)."""
    with ExitStack() as stack:
        for connection in connections.all(initialized_only=True):
            if connection.connection is None or not in_callers_transaction(connection):
                continue
            blocks = connection.atomic_blocks
            durable_within = not blocks or getattr(blocks[-1], "_from_testcase", False)
            savepoint = transaction.atomic(using=connection.alias)
            savepoint._from_testcase = durable_within  # type: ignore[attr-defined]
            stack.enter_context(savepoint)
        yield


def _close(gen: Any) -> None:
    """Close a suspended generator (its ``finally`` blocks run); never raise from it."""
    try:
        gen.close()
    except Exception:
        logger.warning("a workflow raised while being closed after a suspension", exc_info=True)
