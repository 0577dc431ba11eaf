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

User code never runs inside a database transaction of the runtime's, but a
``step.atomic`` function, which runs in the transaction that records its step (its writes
commit with the heap row, or not at all). A run inside a
transaction of the caller's (a ``TestCase``, or ``run_execution`` in a
``transaction.atomic``) runs each ``step.run`` function in a savepoint
(``plain_steps.step_savepoints``), so a database error of the function fails the step, as
in a worker, instead of leaving the caller's transaction unusable. A store step's updater,
selector and claim (and the store's ``initial`` and schema) run in the store client's
read/compute/CAS loop; the step's heap row is handed to the store commit as a
:class:`~yieldstar_django.connector.CommitHook`, so the row and the store's change (with
its ledger entry) commit together or not at all. The unique (execution, step key)
constraint means a step has at most one recorded outcome, whoever records it first.

The engine knows no step kind by itself: each is a
:class:`~yieldstar_django.runtime.context.Kind` (``runtime/kinds.py`` lists them) that
runs a step through its :class:`~yieldstar_django.runtime.context.StepContext`; keys,
replay, non-determinism and the end-of-step error handling are the engine's, alike for
every kind (``runtime/context.py``).
"""

from __future__ import annotations

import inspect
import logging
import reprlib
import time
from contextvars import ContextVar
from typing import Any

from .. import clock
from ..core.durable import decode_durable, encode_durable
from ..core.errors import WorkflowValueError
from ..core.store import StoreClient
from ..models.runtime import ExecutionStep, StepStatus
from ..observability import metrics, tracing
from .context import Kind, RunState, StepContext, run_step
from .errors import NonDeterminismError, StepKeyError, error_from_record
from .kinds import KINDS
from .leases import Lease
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
)
from .registry import Workflow
from .steps import Step, StepCall

logger = logging.getLogger("yieldstar_django.runtime")

__all__ = [
    "Engine",
    "RunCutOff",
    "RunOutcome",
    "RunSliceEnded",
    "durable_limits",
    "encode_error",
    "run_deadline",
]

#: A ``time.monotonic()`` time past which a run stops before its next step (``RunCutOff``).
#: Set by ``yieldstar_django.testing`` around the runs it makes, so its time limit holds
#: for a run that goes on from step to step without suspending; never in production.
run_deadline: ContextVar[float | None] = ContextVar("yieldstar_run_deadline", default=None)


class RunCutOff(Exception):
    """A run stopped between two steps because ``run_deadline`` passed. What it recorded
    stays recorded; ``run_execution`` lets the lease go with a run requested at once (the
    execution stays due) and raises it on."""


class RunSliceEnded(Exception):
    """A run stopped before a step it would execute because its time slice
    (``RUN_SLICE_SECONDS``) is used up. What it recorded stays recorded; ``run_execution``
    lets the lease go with a run requested at once."""


class Engine:
    """Replays one execution once. Create one per run; ``run()`` returns how it ended.

    ``LeaseLost`` propagates (nothing more may be recorded); so do ``RunCutOff``,
    ``RunSliceEnded`` and any
    error of the runtime itself (a database error, say), which leave the execution for a
    later run.
    """

    def __init__(
        self,
        workflow: Workflow[Any, Any],
        lease: Lease,
        client: StoreClient,
        *,
        slice_end: float | None = None,
    ) -> None:
        self.workflow = workflow
        #: A ``time.monotonic()`` time past which the run stops before the next step it
        #: would execute (``RunSliceEnded``), once it has executed one.
        self.slice_end = slice_end
        #: Steps this run executed (not replayed).
        self.executed = 0
        self.lease = lease
        self.execution = lease.execution
        #: What the run's steps share (the heap, the fenced writes): ``StepContext``'s.
        self.state = RunState(lease, client)
        self.limits = self.state.limits
        #: The ledger (and waiter) keys this run's store steps use, by store: each names
        #: the step key that uses it (see ``_reserve``).
        self.ledger_keys: dict[tuple[str, str, str], str] = {}
        self.position = 0
        #: Keys of steps with a registered waiter whose result is not recorded yet.
        self.open_takes: set[str] = {
            key
            for key, row in self.state.heap.items()
            if row.status == StepStatus.PENDING and _waits(KINDS.get(row.kind))
        }
        #: Whether the run's steps make spans; whether they are observed at all (spans or
        #: metrics): decided once per run, not per step.
        self.traced = tracing.enabled()
        self.observed = self.traced or metrics.enabled()

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
        kind = KINDS.get(call.kind)
        if kind is None:  # pragma: no cover
            raise TypeError(f"unknown step kind {call.kind!r}")
        key = call.key if call.key is not None else str(self.position)
        position = self.position
        if kind.indexed:
            self.position += 1
        used = self.state.used
        if key in used:
            raise StepKeyError(
                kind.reused.format(
                    key=key, fingerprint=call.fingerprint, execution=self.execution.id
                )
            )
        used.add(key)
        self._reserve(kind, call, key)
        row = self.state.heap.get(key)
        ctx = StepContext(self.state, kind, call, key, position, row)
        if row is not None:
            if row.kind != call.kind or not call.matches(row.fingerprint):
                raise NonDeterminismError.at(
                    self.execution.id,
                    key,
                    recorded=(row.kind, row.fingerprint),
                    replayed=(call.kind, call.fingerprint),
                )
            if row.status == StepStatus.COMPLETED:
                return StepValue(kind.replay(ctx))
            if row.status == StepStatus.FAILED:
                return StepError(error_from_record(decode_durable(row.error_json)))
        if self.slice_end is not None and self.executed and time.monotonic() >= self.slice_end:
            raise RunSliceEnded(self.execution.id)
        self.executed += 1
        self.state.step_started = clock.now()
        if self.observed:
            result = self._observed(ctx, call, key, row)
        else:
            result = run_step(ctx)
        if kind.waiters is not None:
            self.open_takes.discard(key)
        if isinstance(result, StepError):
            # The workflow sees the error as recorded, as every replay will (its class
            # found again, its durable attributes): the live exception may be of a class
            # that cannot be imported, or carry attributes that were not recorded, and a
            # first run that caught it must not take a branch its replays do not.
            return StepError(error_from_record(decode_durable(encode_error(result.error))))
        return result

    def _observed(
        self, ctx: StepContext, call: StepCall, key: str, row: ExecutionStep | None
    ) -> StepResult:
        """``run_step(ctx)`` in a ``yieldstar.step`` span (tracing on), its duration
        observed (metrics on); a woken step's result observes the wake's latency."""
        store = call.definition
        span = tracing.span(
            "yieldstar.step",
            _step_attributes(call, key, row) if self.traced else None,
            quiet=QUIET,
        )
        woken = key in self.open_takes
        token = tracing.committed_version.set(None) if store is not None else None
        started = time.perf_counter()
        try:
            with span:
                try:
                    result = run_step(ctx)
                except Suspend:
                    span.set("yieldstar.step.outcome", "suspended")
                    raise
                if isinstance(result, StepError):
                    span.set("yieldstar.step.outcome", "failed")
                    span.error(result.error)
                else:
                    span.set("yieldstar.step.outcome", "completed")
                if token is not None:
                    span.set("yieldstar.store.version", tracing.committed_version.get())
        finally:
            metrics.step_duration(call.kind, time.perf_counter() - started)
            if token is not None:
                tracing.committed_version.reset(token)
        if woken:
            metrics.wake_latency()
        return result

    def _reserve(self, kind: Kind, call: StepCall, key: str) -> None:
        """Note the ledger keys a store step uses; raise ``StepKeyError`` if another step
        of the run uses one on the same store.

        ``take`` and ``update`` use their step key, a leased take also ``<key>:release``
        (its hand-back), and choice ``i`` of a ``take_any`` ``<key>#<i>``
        (``Kind.ledger_keys``): a step keyed like one of those would read the other's
        ledger entry back as its own result.
        """
        if kind.ledger_keys is None:
            return
        for use in kind.ledger_keys(call, key):
            other = self.ledger_keys.setdefault(use, key)
            if other != key:
                raise StepKeyError(
                    f"step {key!r} of execution {self.execution.id!r} would use the ledger "
                    f"key {use[2]!r} of store {use[0]}/{use[1]}, which step {other!r} uses; "
                    "give it another key="
                )


#: What a step's span does not record as an error: a suspension, the worker's own stops.
def _step_attributes(
    call: StepCall, key: str, row: ExecutionStep | None
) -> dict[str, str | int | float | bool]:
    """The attributes a step's span starts with (its outcome and committed version are set
    as it ends)."""
    attributes: dict[str, str | int | float | bool] = {
        "yieldstar.step.kind": call.kind,
        "yieldstar.step.key": key,
        "yieldstar.step.attempt": (row.attempts if row is not None else 0) + 1,
    }
    store = call.definition
    if store is not None:
        attributes["yieldstar.store"] = store.name
        attributes["yieldstar.store.id"] = call.store_id
    return attributes


QUIET: tuple[type[BaseException], ...] = (Suspend, *NOT_RECORDED)


def _waits(kind: Kind | None) -> bool:
    """Whether a pending step of ``kind`` has registered waiters."""
    return kind is not None and kind.waiters is not None


def _close(gen: Any) -> None:
    """Close a suspended generator (its ``finally`` blocks run); never raise from it."""
    try:
        gen.close()
    except Exception:
        logger.warning("a workflow raised while being closed after a suspension", exc_info=True)
