"""The replay check: recorded heaps replayed against the current workflow code, with nothing
executed and nothing written (``python manage.py yieldstar_check_replay``).

Each execution's workflow function is called from the top, as a run would call it, and
every step it yields is answered from the heap only: a completed step's recorded result
is sent back, a failed step's recorded error thrown in, through the same ``Kind.replay``
the engine uses. No step executes: no ``step.run`` or ``step.atomic`` function is called,
no store is read or written, no waiter, timer or heap row is written. The check of an
execution ends when the code reaches a step the heap has not recorded (or a ``pending``
one): the frontier, where a real run would execute it.

It reports, as the engine would raise ``NonDeterminismError`` or ``StepKeyError`` on the
next run (or worse, silently take another branch):

- ``kind`` / ``fingerprint``: the code makes, under a recorded step key, a step of another
  kind or on another function or store;
- ``key``: the code makes a step the heap has not recorded while recorded steps further on
  are not reached yet (a step inserted before them with a key of its own, or the steps
  renamed), or uses a key twice;
- ``removed``: the code returns or raises while recorded steps were never reached;
- ``outcome``: the code raises where the recorded execution completed;
- ``unregistered``: a live execution's workflow is not registered in this process.

``step.patched()`` calls the heap has not recorded are decided as a run would decide them
(``True`` at the frontier, ``False`` with recorded steps ahead), without recording.
Plain Python code of the workflow between its steps does run (as on every replay): keep it
free of side effects, as workflow code must be. Each execution is checked inside a
transaction that is rolled back, so even a workflow that writes to the database directly
leaves nothing behind.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Final, cast

from django.db import transaction

from ..conf import database_alias
from ..core.durable import decode_durable
from ..models.runtime import (
    TERMINAL_STATUSES,
    Execution,
    ExecutionStatus,
    ExecutionStep,
    StepKind,
    StepStatus,
)
from .context import RunState, StepContext
from .errors import NonDeterminismError, describe, error_from_record
from .kinds import KINDS
from .registry import Workflow, get_workflow
from .steps import Step, StepCall

__all__ = ["ReplayMismatch", "ReplayReport", "check_execution", "check_replay"]

#: Executions read per query while checking.
CHUNK: Final = 200


@dataclass(frozen=True)
class ReplayMismatch:
    """One execution whose recorded heap the current code no longer matches: at
    ``step_key`` (``""`` when no one step is to blame) the heap recorded ``recorded`` and
    the code made ``replayed``; ``problem`` is one of ``kind``, ``fingerprint``, ``key``,
    ``removed``, ``outcome``, ``unregistered``."""

    execution_id: str
    workflow_id: str
    step_key: str
    problem: str
    recorded: str
    replayed: str
    message: str


@dataclass
class ReplayReport:
    """What :func:`check_replay` found: how many executions it replayed, those that do
    not match, and how many it skipped (finished executions of workflows this process
    does not register)."""

    checked: int = 0
    skipped: int = 0
    mismatches: list[ReplayMismatch] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "checked": self.checked,
            "skipped": self.skipped,
            "mismatches": [asdict(m) for m in self.mismatches],
        }


class _Replay:
    """What a ``Kind.replay`` reads of a run (``StepContext``'s ``_run``): the execution,
    the heap, the keys reached. No lease, no client: nothing can be written."""

    def __init__(self, execution: Execution, heap: dict[str, ExecutionStep]) -> None:
        self.execution = execution
        self.heap = heap
        self.used: set[str] = set()

    def unreached(self) -> list[ExecutionStep]:
        """Recorded steps (not patch decisions) the code has not reached, in replay order."""
        rows = [
            row
            for key, row in self.heap.items()
            if key not in self.used and row.kind != StepKind.PATCH
        ]
        return sorted(rows, key=lambda row: (row.position, row.pk))


class _Mismatch(Exception):
    def __init__(self, step_key: str, problem: str, recorded: str, replayed: str, message: str):
        super().__init__(message)
        self.args_ = (step_key, problem, recorded, replayed, message)


def _unreached_mismatch(replay: _Replay, what: str) -> _Mismatch:
    rows = replay.unreached()
    first = rows[0]
    keys = ", ".join(repr(row.step_key) for row in rows[:5]) + (" ..." if len(rows) > 5 else "")
    recorded = describe(first.kind, first.fingerprint)
    return _Mismatch(
        first.step_key,
        "removed",
        recorded,
        what,
        f"the code {what} without reaching recorded step(s) {keys} (first: {recorded})",
    )


def _replay(execution: Execution, workflow: Workflow[Any, Any], rows: list[ExecutionStep]) -> None:
    """Replay ``rows`` (the heap) under ``workflow``'s current code; ``_Mismatch`` at the
    first disagreement, nothing when the code reaches the frontier or ends as recorded."""
    replay = _Replay(execution, {row.step_key: row for row in rows})
    step = Step(execution.id, execution.workflow_id)
    try:
        inputs = decode_durable(execution.input_json)
        gen = workflow.fn(step, *inputs["args"], **inputs["kwargs"])
    except Exception as exc:
        _ended_raising(replay, exc)
        return
    if not inspect.isgenerator(gen):
        raise _Mismatch("", "outcome", execution.status, "no generator", "the code is no generator")
    send: Any = None
    throw: BaseException | None = None
    position = 0
    try:
        while True:
            try:
                call = gen.send(send) if throw is None else gen.throw(throw)
            except StopIteration:
                if replay.unreached():
                    raise _unreached_mismatch(replay, "returned") from None
                return
            except Exception as exc:
                _ended_raising(replay, exc)
                return
            send, throw = None, None
            if not isinstance(call, StepCall):
                raise _Mismatch(
                    "", "outcome", "a step", repr(call)[:200], "the code yields no step"
                )
            kind = KINDS.get(call.kind)
            if kind is None:  # pragma: no cover
                raise TypeError(f"unknown step kind {call.kind!r}")
            key = call.key if call.key is not None else str(position)
            at = position
            if kind.indexed:
                position += 1
            made = describe(call.kind, call.fingerprint)
            if key in replay.used:
                raise _Mismatch(key, "key", "", made, f"the code uses step key {key!r} twice")
            row = replay.heap.get(key)
            if row is None:
                if call.kind == StepKind.PATCH:
                    # As a run decides it (``patches.decide``), without recording it.
                    send = not replay.unreached()
                    replay.used.add(key)
                    continue
                if replay.unreached():
                    first = replay.unreached()[0]
                    raise _Mismatch(
                        key,
                        "key",
                        describe(first.kind, first.fingerprint),
                        made,
                        f"the code makes step {key!r} ({made}), which the heap has not "
                        f"recorded, before recorded step {first.step_key!r} "
                        f"({describe(first.kind, first.fingerprint)})",
                    )
                return  # the frontier: a run would execute this step
            replay.used.add(key)
            if row.kind != call.kind or not call.matches(row.fingerprint):
                error = NonDeterminismError.at(
                    execution.id,
                    key,
                    recorded=(row.kind, row.fingerprint),
                    replayed=(call.kind, call.fingerprint),
                )
                problem = "kind" if row.kind != call.kind else "fingerprint"
                raise _Mismatch(key, problem, error.recorded, error.replayed, str(error))
            if row.status == StepStatus.COMPLETED:
                ctx = StepContext(cast(RunState, replay), kind, call, key, at, row)
                send = kind.replay(ctx)
            elif row.status == StepStatus.FAILED:
                throw = error_from_record(decode_durable(row.error_json))
            else:
                return  # pending: the frontier
    finally:
        gen.close()


def _ended_raising(replay: _Replay, exc: BaseException) -> None:
    """The code raised ``exc`` (a recorded error it did not catch, or one of its own)."""
    if replay.unreached():
        raise _unreached_mismatch(replay, f"raised {type(exc).__name__}: {exc}"[:300])
    if replay.execution.status == ExecutionStatus.COMPLETED:
        raise _Mismatch(
            "",
            "outcome",
            "completed",
            f"raised {type(exc).__name__}",
            f"the execution completed, but its replay raised {type(exc).__name__}: {exc}"[:500],
        )


def check_execution(execution: Execution, *, using: str | None = None) -> ReplayMismatch | None:
    """Replay one execution's heap under the current code; its mismatch, or ``None``.
    ``LookupError`` if its workflow is not registered here."""
    alias = database_alias(using)
    workflow = get_workflow(execution.workflow_id)
    rows = list(ExecutionStep.objects.using(alias).filter(execution_id=execution.id))
    with transaction.atomic(using=alias):
        try:
            _replay(execution, workflow, rows)
        except _Mismatch as mismatch:
            step_key, problem, recorded, replayed, message = mismatch.args_
            return ReplayMismatch(
                execution.id, execution.workflow_id, step_key, problem, recorded, replayed, message
            )
        finally:
            transaction.set_rollback(True, using=alias)
    return None


def _executions(
    alias: str,
    workflow: str | None,
    since: datetime | None,
    limit: int | None,
    live: bool,
) -> Iterator[Execution]:
    rows = Execution.objects.using(alias).order_by("-created_at", "-id")
    if workflow is not None:
        rows = rows.filter(workflow_id=workflow)
    if since is not None:
        rows = rows.filter(created_at__gte=since)
    if live:
        rows = rows.exclude(status__in=TERMINAL_STATUSES)
    if limit is not None:
        rows = rows[:limit]
    return rows.iterator(chunk_size=CHUNK)


def check_replay(
    *,
    workflow: str | None = None,
    since: datetime | None = None,
    limit: int | None = None,
    live: bool = False,
    using: str | None = None,
) -> ReplayReport:
    """Replay the recorded heaps of executions (of ``workflow``, created since ``since``,
    unfinished only with ``live``; at most ``limit``, newest first) under the current code
    and report the ones that no longer match (see the module doc). Writes nothing."""
    alias = database_alias(using)
    report = ReplayReport()
    for execution in _executions(alias, workflow, since, limit, live):
        try:
            mismatch = check_execution(execution, using=alias)
        except LookupError:
            if execution.is_finished:
                report.skipped += 1
                continue
            mismatch = ReplayMismatch(
                execution.id,
                execution.workflow_id,
                "",
                "unregistered",
                execution.workflow_id,
                "",
                f"workflow {execution.workflow_id!r} of this live execution is not registered",
            )
        report.checked += 1
        if mismatch is not None:
            report.mismatches.append(mismatch)
    return report
