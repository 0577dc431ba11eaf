"""Errors of the workflow runtime, and how a step's error is recorded and revived.

A step error is recorded as a durable dict and re-raised into the workflow on every replay
as the same class: a class registered with ``register_error_class`` is found by its
registered name; any other exception class by its import path (``module:qualname``,
builtins included). A class that can no longer be imported is revived as
``WorkflowStepError``. Revival never calls ``__init__``: it sets ``args`` and the recorded
durable attributes, so it has no side effects and needs no particular signature.
"""

from __future__ import annotations

import builtins
import math
import sys
import traceback
from dataclasses import KW_ONLY, dataclass
from datetime import timedelta
from importlib import import_module
from typing import Any, ClassVar

from ..conf import MAX_SECONDS, is_finite
from ..core.durable import check_durable
from ..core.errors import (
    WorkflowValueError,
    YieldstarError,
    error_class,
    register_error_class,
    registered_error_name,
)

__all__ = [
    "ChildCancelledError",
    "ChildFailedError",
    "CrossDatabaseWriteError",
    "DeadlineExceededError",
    "ExecutionConflictError",
    "NonDeterminismError",
    "RetryableError",
    "StepKeyError",
    "WorkflowStepError",
    "error_from_record",
    "error_to_record",
]

#: Longest traceback text kept with a recorded error.
MAX_TRACEBACK_CHARS = 8000


class RetryableError(YieldstarError):
    """Raise it from a ``step.run`` function to have the step retried on a durable timer.

    ``max_attempts`` counts every attempt, the first included; attempt ``n + 1`` starts
    ``retry_interval * backoff ** (n - 1)`` seconds after attempt ``n`` failed, at most
    ``MAX_SECONDS`` (100 years, past which the timer's due time overflows). After the
    last attempt the step fails with the error's ``__cause__`` when there is one (so
    ``raise RetryableError(max_attempts=5) from exc`` retries ``exc`` and finally records
    it), else with this error. Subclasses may set the three as class attributes::

        class GatewayTimeout(RetryableError):
            max_attempts = 5
            retry_interval = 2.0
    """

    max_attempts: ClassVar[int] = 3
    retry_interval: ClassVar[float] = 1.0
    backoff: ClassVar[float] = 1.0

    def __init__(
        self,
        *args: object,
        max_attempts: int | None = None,
        retry_interval: float | timedelta | None = None,
        backoff: float | None = None,
    ) -> None:
        super().__init__(*args)
        if max_attempts is not None:
            if max_attempts < 1:
                raise ValueError("max_attempts must be at least 1")
            self.max_attempts = max_attempts  # type: ignore[misc]
        if retry_interval is not None:
            if isinstance(retry_interval, timedelta):
                retry_interval = retry_interval.total_seconds()
            if not is_finite(retry_interval) or retry_interval < 0:
                raise ValueError("retry_interval must be a finite number >= 0")
            # past MAX_SECONDS, delay_after() caps it anyway (and an int past a float's
            # range has no float)
            self.retry_interval = float(min(retry_interval, MAX_SECONDS))  # type: ignore[misc]
        if backoff is not None:
            if not is_finite(backoff) or backoff < 1:
                raise ValueError("backoff must be a finite number >= 1")
            self.backoff = float(min(backoff, sys.float_info.max))  # type: ignore[misc]

    def delay_after(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based), at most
        ``MAX_SECONDS``: ``backoff ** n`` grows past any due time the timers can hold
        (and past a float) long before a large ``max_attempts`` runs out."""
        try:
            delay = float(self.retry_interval * self.backoff ** max(attempt - 1, 0))
        except OverflowError:
            delay = math.inf
        if math.isnan(delay):  # a class attribute that is not a number of seconds
            delay = math.inf
        return min(max(delay, 0.0), float(MAX_SECONDS))

    def final_error(self) -> BaseException:
        """What the step records once no attempt is left: the cause, else this error."""
        cause = self.__cause__
        return cause if isinstance(cause, Exception) else self


@dataclass(eq=False, repr=False)
class CrossDatabaseWriteError(YieldstarError):
    """A ``step.atomic`` function wrote through another database alias than the step's.

    The function runs in one transaction on ``DATABASE_ALIAS``, the one that records the
    step; a statement sent through another alias would commit on its own (or never), not
    with the step. It is refused before it reaches that database, and the step fails with
    this error (recorded and raised into the workflow, as any error of the function).
    ``alias`` is the alias written to, ``step_alias`` the step's, ``statement`` the head
    of the refused SQL.
    """

    alias: str
    step_alias: str
    statement: str

    def __post_init__(self) -> None:
        super().__init__(
            f"step.atomic() runs its function in one transaction on the database "
            f"{self.step_alias!r}, which records the step; it wrote through {self.alias!r} "
            f"({self.statement}). Route that model to {self.step_alias!r}, or write it in "
            "a step.run() of its own (at least once)."
        )


@dataclass(eq=False, repr=False)
class NonDeterminismError(YieldstarError):
    """Replay reached a recorded step that the workflow code no longer makes.

    The execution fails with it; it is never thrown into the workflow. It means the code
    of a workflow changed while executions of it were in flight (a step was inserted,
    removed or reordered without a new ``key``). The message names the step key, what
    the heap recorded there (kind and fingerprint) and what the new code made, and
    points to ``step.patched``.
    """

    execution_id: str
    step_key: str
    _: KW_ONLY
    recorded: str
    replayed: str
    recorded_kind: str = ""
    replayed_kind: str = ""

    def __post_init__(self) -> None:
        step_key = self.step_key
        super().__init__(
            f"Execution {self.execution_id!r} replayed step {step_key!r} as {self.replayed} "
            f"(kind {self.replayed_kind!r}, key {step_key!r}), but its heap recorded "
            f"{self.recorded} (kind {self.recorded_kind!r}, key {step_key!r}). "
            "The workflow code changed under a "
            "running execution: guard the change with "
            '`if (yield from step.patched("change-id")):` so executions recorded before it '
            "keep the old steps (see docs/howto/versioning.md), give new steps their own "
            "key=, or start a new execution."
        )

    @classmethod
    def at(
        cls,
        execution_id: str,
        step_key: str,
        *,
        recorded: tuple[str, str],
        replayed: tuple[str, str],
    ) -> NonDeterminismError:
        """The error for a step recorded as ``(kind, fingerprint)`` and replayed as
        another ``(kind, fingerprint)``."""
        return cls(
            execution_id,
            step_key,
            recorded=describe(*recorded),
            replayed=describe(*replayed),
            recorded_kind=recorded[0],
            replayed_kind=replayed[0],
        )


def describe(kind: str, fingerprint: str) -> str:
    """``kind(fingerprint)``, or the kind alone: how messages name a step."""
    return f"{kind}({fingerprint})" if fingerprint else kind


class StepKeyError(YieldstarError):
    """A workflow used one step key twice in one run. Keys must be unique per execution."""


@dataclass(eq=False, repr=False)
class ExecutionConflictError(YieldstarError, ValueError):
    """A start named an existing execution (``execution_id=...``) with another workflow or
    other arguments. Nothing was started and the existing execution is unchanged.

    ``execution_id`` is the id asked for, ``workflow_id`` the workflow of the execution
    that has it, and ``conflict`` what differs: ``"workflow"`` or ``"arguments"`` (the
    ``args`` and ``kwargs`` as given, compared as durable values: ``f(1)`` and ``f(x=1)``
    differ, so do ``1`` and ``1.0``), or ``"fork"`` for ``fork_execution`` into an id that
    is not the same fork. A subclass of ``ValueError``, which a start of an existing id of
    another workflow raised before.
    """

    execution_id: str
    workflow_id: str
    conflict: str

    def __post_init__(self) -> None:
        if self.conflict == "workflow":
            what = f"for workflow {self.workflow_id!r}"
        elif self.conflict == "fork":
            what = f"of workflow {self.workflow_id!r} and is not this fork"
        else:
            what = f"of workflow {self.workflow_id!r} with other arguments"
        super().__init__(
            f"execution {self.execution_id!r} already exists {what}; nothing was started"
        )


@dataclass(eq=False, repr=False)
class ChildFailedError(YieldstarError):
    """An execution that ``step.wait`` or ``step.gather`` waited for failed.

    ``execution_id`` is that execution, ``error_type`` and ``error_message`` the type and
    message of the error it failed with (its ``error``). Recorded as the waiting step's
    error: every replay raises it again.
    """

    execution_id: str
    error_type: str
    error_message: str

    def __post_init__(self) -> None:
        super().__init__(
            f"execution {self.execution_id!r} failed: {self.error_type}: {self.error_message}"
        )


@dataclass(eq=False, repr=False)
class ChildCancelledError(YieldstarError):
    """An execution that ``step.wait`` or ``step.gather`` waited for was cancelled (by
    ``cancel_execution``, or its deadline: ``reason`` is then ``"DeadlineExceededError"``)."""

    execution_id: str
    reason: str = ""

    def __post_init__(self) -> None:
        why = f" ({self.reason})" if self.reason else ""
        super().__init__(f"execution {self.execution_id!r} was cancelled{why}")


@dataclass(eq=False, repr=False)
class DeadlineExceededError(YieldstarError):
    """What a cancelled execution records as its ``error`` when its deadline
    (``@workflow(..., timeout=)``, ``start_workflow(..., timeout=)``, or its parent's)
    passed before it finished. ``deadline`` is that time (ISO 8601)."""

    execution_id: str
    deadline: str

    def __post_init__(self) -> None:
        super().__init__(
            f"execution {self.execution_id!r} passed its deadline {self.deadline} and was cancelled"
        )


class WorkflowStepError(YieldstarError):
    """Revives a recorded error whose class can no longer be found.

    ``error_type`` names the original class; ``str()`` is its message.
    """

    def __init__(self, error_type: str, message: str) -> None:
        self.error_type = error_type
        super().__init__(message)


for _cls in (
    RetryableError,
    NonDeterminismError,
    StepKeyError,
    WorkflowStepError,
    ExecutionConflictError,
    ChildFailedError,
    ChildCancelledError,
    DeadlineExceededError,
):
    register_error_class(_cls.__name__, _cls)

# Attributes every exception carries that are not part of its recorded state.
_SKIPPED_ATTRS = frozenset({"__traceback__", "__cause__", "__context__", "__notes__"})


#: What ``_durable`` returns for a value that is not durable (``None`` is one that is).
_NOT_DURABLE: Any = object()


def _durable(value: Any) -> Any:
    """``value`` as it is recorded (a tuple as a list), or ``_NOT_DURABLE``."""
    if isinstance(value, tuple):
        value = list(value)
    try:
        check_durable(value)
    except WorkflowValueError:
        return _NOT_DURABLE
    return value


def _durable_attrs(exc: BaseException) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    for name, value in vars(exc).items():
        if name in _SKIPPED_ATTRS or name.startswith("__"):
            continue
        durable = _durable(value)
        if durable is not _NOT_DURABLE:
            attrs[name] = durable
    return attrs


def _durable_arg(value: Any) -> Any:
    """An argument of an error as recorded: its durable value (``None`` included), else
    its ``str()``."""
    durable = _durable(value)
    return _safe_str(value) if durable is _NOT_DURABLE else durable


def error_type_name(cls: type[BaseException]) -> str:
    """The name an error class is recorded under: registered name, else ``module:qualname``."""
    registered = registered_error_name(cls)
    if registered is not None:
        return registered
    return f"{cls.__module__}:{cls.__qualname__}"


#: The attribute of a revived error holding the message its record kept (a dunder name, so
#: never recorded as one of its attributes).
_RECORDED_MESSAGE = "__yieldstar_message__"


def _message(exc: BaseException) -> str:
    """``str(exc)``; for a revived error whose ``str()`` is empty or raises (its
    ``__init__`` set state that was not recorded: a ``UnicodeDecodeError``'s, an attribute
    that is not durable), the message its record kept."""
    try:
        text = str(exc)
    except Exception:
        text = ""
    if text:
        return text
    recorded = vars(exc).get(_RECORDED_MESSAGE) if hasattr(exc, "__dict__") else None
    if isinstance(recorded, str) and recorded:
        return recorded
    return _safe_str(exc)


def _safe_str(value: object) -> str:
    """``str(value)``, or a stand-in if its ``__str__`` raises (as ``traceback`` does)."""
    try:
        return str(value)
    except Exception:
        return f"<{type(value).__name__}: str() failed>"


def error_to_record(exc: BaseException) -> dict[str, Any]:
    """A durable description of ``exc``: type, message, args, attributes, traceback.

    Never raises for a broken ``__str__`` (of the error or of an argument): recording the
    error must not crash the run, which would leave the execution running, and run it
    again at every lease timer."""
    args = [_durable_arg(arg) for arg in exc.args]
    text = "".join(traceback.format_exception(exc))
    if len(text) > MAX_TRACEBACK_CHARS:
        text = "...\n" + text[-MAX_TRACEBACK_CHARS:]
    record: dict[str, Any] = {
        "type": error_type_name(type(exc)),
        "message": _clean_text(_message(exc)),
        "args": [_clean_text(a) if isinstance(a, str) else a for a in args],
        "attrs": _durable_attrs(exc),
        "traceback": _clean_text(text),
    }
    return record


def _clean_text(text: str) -> str:
    """Replace what a durable string cannot hold (NUL, lone surrogates)."""
    text = text.replace("\x00", "\\x00")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def resolve_error_class(name: str) -> type[BaseException] | None:
    """The class recorded as ``name``: registry first, then its import path."""
    cls = error_class(name)
    if cls is not None:
        return cls
    module_name, sep, qualname = name.partition(":")
    if not sep:
        candidate = getattr(builtins, name, None)
        return candidate if _is_exception_class(candidate) else None
    try:
        target: Any = import_module(module_name)
        for part in qualname.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError):
        return None
    return target if _is_exception_class(target) else None


def _is_exception_class(value: object) -> bool:
    return isinstance(value, type) and issubclass(value, BaseException)


def error_from_record(record: dict[str, Any]) -> BaseException:
    """Revive a recorded error as its class, without calling ``__init__``."""
    name = str(record.get("type", ""))
    message = str(record.get("message", ""))
    args = tuple(record.get("args") or ())
    cls = resolve_error_class(name)
    exc: BaseException
    if cls is None:
        exc = WorkflowStepError(name, message)
    else:
        try:
            exc = cls.__new__(cls, *args)
            exc.args = args
            for attr, value in (record.get("attrs") or {}).items():
                setattr(exc, attr, value)
        except Exception:
            exc = WorkflowStepError(name, message)
    try:
        setattr(exc, _RECORDED_MESSAGE, message)  # for error_to_record
    except Exception:
        pass
    recorded_traceback = record.get("traceback")
    if recorded_traceback:
        try:
            exc.add_note(f"Recorded traceback of the step's error:\n{recorded_traceback}")
        except Exception:
            pass
    return exc
