"""What a step and a run of the engine produce: a step's value or error, a suspension,
and how a run ended; errors as recorded text."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from celery.exceptions import SoftTimeLimitExceeded, Terminated, WorkerTerminate

from ..conf import yieldstar_settings
from ..core.commits import StoreMutation
from ..core.durable import DurableLimits, decode_durable, encode_durable
from ..core.errors import WorkflowValueError
from ..core.results import RecordedResult, result_from_record
from ..models.runtime import ExecutionStatus
from .errors import error_to_record

__all__ = [
    "MAX_MESSAGE_CHARS",
    "NOT_RECORDED",
    "RunOutcome",
    "StepError",
    "StepResult",
    "StepValue",
    "Suspend",
    "WorkerShuttingDown",
    "completed",
    "durable_limits",
    "encode_error",
    "failed",
    "record_limits",
    "recorded_result",
    "worker_shutting_down_cold",
]

#: Longest error message kept in a recorded error.
MAX_MESSAGE_CHARS: Final = 16_000
#: Bytes a store step's heap record may add around the value it holds: the keys and
#: versions (and a 64-character instance id) of an update's or a get's, a take_any's index.
RECORD_ROOM: Final = 1024
#: Values a store step's heap record may add around the value it holds (its keys' values).
RECORD_NODES: Final = 16


def durable_limits() -> DurableLimits:
    """The durable-value limits from settings (``MAX_STATE_BYTES``, ``MAX_DEPTH``,
    ``MAX_STATE_NODES``)."""
    return DurableLimits(
        max_bytes=int(yieldstar_settings.MAX_STATE_BYTES),
        max_depth=int(yieldstar_settings.MAX_DEPTH),
        max_nodes=int(yieldstar_settings.MAX_STATE_NODES),
    )


def record_limits(limits: DurableLimits) -> DurableLimits:
    """What a store step's heap record is checked with: ``limits``, plus the room and the
    level of nesting of the record's own wrapper (a dict, a pair), so a value within
    ``limits`` (a state the store holds) is always recorded."""
    return DurableLimits(
        max_bytes=limits.max_bytes + RECORD_ROOM,
        max_depth=limits.max_depth + 1,
        max_nodes=limits.max_nodes + RECORD_NODES,
    )


class WorkerShuttingDown(WorkerTerminate):
    """Raised instead of recording an error while this process's Celery worker shuts down
    cold (a ``SystemExit``, so it is in ``NOT_RECORDED``): the run ends unrecorded."""


def worker_shutting_down_cold() -> bool:
    """Whether this process is a Celery worker shutting down cold (SIGQUIT, a second
    Ctrl+C, SIGTERM under ``REMAP_SIGTERM=SIGQUIT``): Celery has set
    ``celery.worker.state.should_terminate``, as its own ``maybe_shutdown`` tests it."""
    state = sys.modules.get("celery.worker.state")
    flag = getattr(state, "should_terminate", None)
    return flag is not None and flag is not False


def encode_error(exc: BaseException) -> str:
    """The canonical text of ``error_to_record(exc)``, trimmed to fit the limits.

    Every error a run records goes through here. While the worker shuts down cold it raises
    ``WorkerShuttingDown`` instead: Celery cancels the tasks in progress from its signal
    handler, which the solo pool runs in the thread of the task, so what the cancel raises
    (``NotImplementedError`` from the solo pool) surfaces in a step or in the workflow's
    code. That is the worker stopping, like the errors of ``NOT_RECORDED``, not the step
    failing: the execution runs again from its last recorded step once its lease expires.
    """
    if worker_shutting_down_cold():
        raise WorkerShuttingDown(
            f"the Celery worker is shutting down cold; {type(exc).__name__} raised in the run "
            "is not recorded"
        ) from exc
    record = error_to_record(exc)
    if len(record["message"]) > MAX_MESSAGE_CHARS:
        record["message"] = record["message"][:MAX_MESSAGE_CHARS] + "..."
    try:
        return encode_durable(record, limits=durable_limits())
    except WorkflowValueError:
        record["args"], record["attrs"] = [], {}
        record["message"] = record["message"][:1000]
        return encode_durable(record)


#: Errors of the worker, not of the step or the workflow (a Celery time limit, the process
#: told to stop), wherever they fire (the workflow's code, a ``step.run`` function, a
#: store step's selector, claim or updater): never recorded, they end the run and the
#: execution resumes later. Any other error, one that is not an ``Exception`` included
#: (``asyncio.CancelledError``), is recorded: raised again at every run, it would otherwise
#: keep the execution running. (Nor is any error raised while the worker shuts down cold:
#: see ``encode_error``.)
NOT_RECORDED: Final[tuple[type[BaseException], ...]] = (
    SoftTimeLimitExceeded,
    Terminated,
    KeyboardInterrupt,
    SystemExit,
    GeneratorExit,
)


@dataclass(frozen=True)
class RunOutcome:
    """How a run ended: ``completed`` / ``failed`` (terminal, with the encoded result or
    error), or ``suspended`` with the status to show, the step it waits on and when a
    timer is due."""

    kind: str
    status: str
    result_json: str = ""
    error_json: str = ""
    waiting_on: str = ""
    wake_at: datetime | None = None

    @property
    def terminal(self) -> bool:
        return self.kind != "suspended"


def completed(result_json: str) -> RunOutcome:
    """A run that returned ``result_json``."""
    return RunOutcome("completed", ExecutionStatus.COMPLETED, result_json=result_json)


def failed(exc: BaseException) -> RunOutcome:
    """A run that raised ``exc`` out of the workflow."""
    return RunOutcome("failed", ExecutionStatus.FAILED, error_json=encode_error(exc))


class Suspend(Exception):
    """Raised by a step that must wait: the run ends with ``outcome`` (``suspended``)."""

    def __init__(self, status: str, step_key: str, wake_at: datetime | None = None) -> None:
        self.outcome = RunOutcome("suspended", status, waiting_on=step_key, wake_at=wake_at)


@dataclass
class StepValue:
    """A step's value, returned into the workflow."""

    value: Any


@dataclass
class StepError:
    """A step's error, thrown into the workflow."""

    error: BaseException


StepResult = StepValue | StepError


def recorded_result(mutation: StoreMutation) -> RecordedResult:
    """The result a committed mutation recorded in the ledger (a step always has one)."""
    assert mutation.encoded_result is not None
    return result_from_record(decode_durable(mutation.encoded_result))
