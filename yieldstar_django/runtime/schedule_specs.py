"""Schedules as values: ``define_schedule``, the checks every schedule passes, and its ticks.

A schedule starts one execution of a workflow per tick. Its ticks are either a cron
expression read in the schedule's time zone (parsed by ``cronsim``, which handles
daylight-saving changes as Debian's cron does) or a fixed interval (``every``), at the
multiples of that interval since the Unix epoch, which no time zone moves. Nothing here
touches the database: ``runtime/schedules.py`` keeps a schedule's state in its table and
fires its ticks from the relay. See ``docs/howto/schedules.md``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from django.core.exceptions import ImproperlyConfigured

from ..conf import MAX_SECONDS
from ..core.durable import encode_durable
from ..core.errors import StoreKeyError, WorkflowValueError
from ..core.keys import check_text
from .registry import Workflow, get_workflow

__all__ = [
    "CATCH_UP_POLICIES",
    "MAX_SCHEDULE_NAME_LENGTH",
    "SCHEDULE_PREFIX",
    "ScheduleDefinition",
    "ScheduleError",
    "define_schedule",
    "get_schedule",
    "registered_schedules",
    "tick_execution_id",
    "unregister_schedule",
]

#: What a schedule does with the ticks it missed (due longer ago than ``SCHEDULE_GRACE``):
#: ``"latest"`` starts one execution, for the latest of them; ``"all"`` one per tick;
#: ``"skip"`` none.
CATCH_UP_POLICIES: Final = ("latest", "all", "skip")

#: The longest schedule name: its ticks' execution ids (``schedule:<name>:<time>Z``, and
#: ``...:now:<time>`` for a trigger) must fit the 255 characters of an execution id.
MAX_SCHEDULE_NAME_LENGTH: Final = 200

#: The prefix of every execution id a schedule derives (reserved: ``principals``).
SCHEDULE_PREFIX: Final = "schedule:"

#: How many candidate times a cron walk reads before it decides an expression has no
#: more ticks (a 30th of February never comes: ``cronsim`` refuses most such expressions).
_MAX_CANDIDATES: Final = 100_000


class ScheduleError(ValueError):
    """A schedule that cannot be kept: a bad cron expression, both or neither of ``cron``
    and ``every``, an unknown time zone or catch-up policy, arguments the workflow cannot
    take. ``field`` names the argument at fault. Raised before anything is stored."""

    def __init__(self, field_name: str, message: str) -> None:
        self.field = field_name
        super().__init__(message)


def _tick_text(moment: datetime) -> str:
    text = moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    if moment.microsecond:
        text += f".{moment.astimezone(UTC).microsecond:06d}"
    return text + "Z"


def tick_execution_id(name: str, tick: datetime) -> str:
    """The id of the execution a schedule's tick starts: ``schedule:<name>:<UTC time>Z``,
    so a tick fired twice names one execution."""
    return f"{SCHEDULE_PREFIX}{name}:{_tick_text(tick)}"


def trigger_execution_id(name: str, moment: datetime) -> str:
    """The id of an execution started by "trigger now": ``schedule:<name>:now:<time>Z``."""
    return f"{SCHEDULE_PREFIX}{name}:now:{_tick_text(moment)}"


def _every_seconds(every: object) -> int:
    if isinstance(every, timedelta):
        seconds: object = every.total_seconds()
    else:
        seconds = every
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ScheduleError("every", f"every must be seconds or a timedelta, not {every!r}")
    if not math.isfinite(seconds) or seconds != int(seconds):
        raise ScheduleError("every", f"every must be a whole number of seconds, not {every!r}")
    if not 1 <= seconds <= MAX_SECONDS:
        raise ScheduleError("every", f"every must be 1 second to 100 years, not {every!r}")
    return int(seconds)


def _zone(name: object) -> ZoneInfo:
    if not isinstance(name, str) or not name or "\x00" in name:
        raise ScheduleError("timezone", f"timezone must be an IANA time zone name, not {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError, TypeError):
        raise ScheduleError("timezone", f"Unknown time zone {name!r}") from None


def _check_cron(cron: object, zone: ZoneInfo) -> str:
    if not isinstance(cron, str) or not cron.strip():
        raise ScheduleError("cron", f"cron must be a cron expression (a str), not {cron!r}")
    cron = " ".join(cron.split())
    if len(cron) > 255 or "\x00" in cron:
        raise ScheduleError("cron", "cron must be at most 255 characters")
    if len(cron.split()) not in (5, 6):
        raise ScheduleError("cron", f"Bad cron expression {cron!r}: 5 fields (or 6, seconds first)")
    try:
        next(CronSim(cron, datetime(2000, 1, 1, tzinfo=zone)))
    except (CronSimError, StopIteration, ValueError, IndexError, KeyError, TypeError) as exc:
        raise ScheduleError("cron", f"Bad cron expression {cron!r}: {exc}") from None
    return cron


@dataclass(frozen=True)
class ScheduleDefinition:
    """A checked schedule: ``name``, the ``workflow`` name, ``cron`` (or ``""``),
    ``every`` (seconds, or ``None``), ``timezone``, ``input_json`` (the canonical
    ``{"args", "kwargs"}`` each tick starts the workflow with) and ``catch_up``. Build one
    with :func:`define_schedule` (registered, from code) or
    ``runtime.schedules.create_schedule`` (a row of the table)."""

    name: str
    workflow: str
    cron: str
    every: int | None
    timezone: str
    input_json: str
    catch_up: str
    zone: ZoneInfo = field(compare=False, repr=False)

    @classmethod
    def build(
        cls,
        name: object,
        workflow: object,
        *,
        cron: object = None,
        every: object = None,
        timezone: object = "UTC",
        args: Any = (),
        kwargs: Any = None,
        catch_up: object = "latest",
    ) -> ScheduleDefinition:
        """Check everything and build the definition, or raise ``ScheduleError``."""
        # The models: imported once a schedule is built (``workflows`` modules import this
        # one before the app registry is ready).
        from .outcomes import durable_limits
        from .starts import bind_arguments

        try:
            check_text("schedule name", name, MAX_SCHEDULE_NAME_LENGTH, empty=False)
        except StoreKeyError as exc:
            raise ScheduleError("name", f"Bad schedule name: {exc}") from None
        assert isinstance(name, str)
        if "/" in name:
            raise ScheduleError(
                "name", f"A schedule name may not hold '/' (it names a URL): {name!r}"
            )
        if isinstance(workflow, Workflow):
            workflow_name = workflow.name
            resolved: Workflow[Any, Any] | None = workflow
        elif isinstance(workflow, str) and workflow:
            workflow_name = workflow
            try:
                resolved = get_workflow(workflow)
            except LookupError:
                resolved = None  # checked when a tick starts it
        else:
            raise ScheduleError(
                "workflow", f"workflow must be a @workflow or its name, not {workflow!r}"
            )
        zone = _zone(timezone)
        assert isinstance(timezone, str)
        if (cron is None) == (every is None):
            raise ScheduleError("cron", "Give exactly one of cron= and every=")
        cron_text = "" if cron is None else _check_cron(cron, zone)
        every_seconds = None if every is None else _every_seconds(every)
        if catch_up not in CATCH_UP_POLICIES:
            raise ScheduleError(
                "catch_up",
                f"catch_up must be one of {', '.join(CATCH_UP_POLICIES)}, not {catch_up!r}",
            )
        if isinstance(args, str | bytes) or not isinstance(args, tuple | list):
            raise ScheduleError("args", f"args must be a tuple or list, not {args!r}")
        kwargs = {} if kwargs is None else kwargs
        if not isinstance(kwargs, dict):
            raise ScheduleError("kwargs", f"kwargs must be a dict, not {kwargs!r}")
        if resolved is not None:
            try:
                bind_arguments(resolved, args, kwargs)
            except TypeError as exc:
                raise ScheduleError("args", str(exc)) from None
        try:
            input_json = encode_durable(
                {"args": list(args), "kwargs": kwargs},
                limits=durable_limits(),
                label=f'The arguments of schedule "{name}"',
            )
        except WorkflowValueError as exc:
            raise ScheduleError("args", str(exc)) from None
        return cls(
            name, workflow_name, cron_text, every_seconds, timezone, input_json, str(catch_up), zone
        )

    # --- ticks --------------------------------------------------------------------------

    def _cron_walk(self, start: datetime, *, reverse: bool = False) -> Iterator[datetime]:
        """Cron times after ``start`` (before it, ``reverse``), as aware UTC times,
        skipping any that a daylight-saving change put out of order."""
        local = start.astimezone(self.zone)
        last = start
        for count, candidate in enumerate(CronSim(self.cron, local, reverse=reverse)):
            if count >= _MAX_CANDIDATES:
                return
            moment = candidate.astimezone(UTC)
            if (moment > last) if not reverse else (moment < last):
                last = moment
                yield moment

    def next_after(self, moment: datetime) -> datetime | None:
        """The first tick strictly after ``moment`` (``None``: there is none)."""
        moment = moment.astimezone(UTC)
        if self.every is not None:
            whole = math.floor(moment.timestamp())
            nxt = (whole // self.every + 1) * self.every
            return datetime.fromtimestamp(nxt, UTC)
        return next(self._cron_walk(moment), None)

    def latest_at_or_before(self, moment: datetime) -> datetime | None:
        """The last tick at or before ``moment`` (``None``: none before it)."""
        moment = moment.astimezone(UTC)
        if self.every is not None:
            whole = math.floor(moment.timestamp())
            return datetime.fromtimestamp(whole // self.every * self.every, UTC)
        return next(self._cron_walk(moment + timedelta(microseconds=1), reverse=True), None)

    def ticks_between(self, start: datetime, end: datetime, limit: int) -> list[datetime]:
        """The ticks ``t`` with ``start <= t <= end``, oldest first, at most ``limit``."""
        found: list[datetime] = []
        if self.every is not None:
            moment = self.next_after(start - timedelta(microseconds=1))
            step = timedelta(seconds=self.every)
            while moment is not None and moment <= end and len(found) < limit:
                found.append(moment)
                moment += step
            return found
        for moment in self._cron_walk(start.astimezone(UTC) - timedelta(microseconds=1)):
            if moment > end or len(found) >= limit:
                break
            found.append(moment)
        return found

    def count_between(self, start: datetime, end: datetime, cap: int) -> int:
        """How many ticks ``t`` with ``start <= t <= end`` (counted up to ``cap``)."""
        if self.every is None:
            return len(self.ticks_between(start, end, cap))
        first = self.next_after(start - timedelta(microseconds=1))
        if first is None or first > end:
            return 0
        return min(cap, int((end - first).total_seconds()) // self.every + 1)

    def describe(self) -> str:
        """``cron "..." in <zone>`` or ``every N s``, for lists."""
        if self.every is not None:
            return f"every {self.every} s"
        return f"cron {self.cron!r} ({self.timezone})"


_registry: dict[str, tuple[ScheduleDefinition, tuple[str, int]]] = {}
_lock = threading.Lock()


def _origin() -> tuple[str, int]:
    import inspect

    frame = inspect.currentframe()
    try:
        caller = frame.f_back.f_back if frame and frame.f_back else None
        return (caller.f_code.co_filename, caller.f_lineno) if caller else ("", 0)
    finally:
        del frame


def define_schedule(
    name: str,
    workflow: Workflow[Any, Any] | str,
    *,
    cron: str | None = None,
    every: float | timedelta | None = None,
    timezone: str = "UTC",
    args: tuple[Any, ...] | list[Any] = (),
    kwargs: dict[str, Any] | None = None,
    catch_up: str = "latest",
) -> ScheduleDefinition:
    """Start ``workflow(*args, **kwargs)`` on every tick of a schedule named ``name``.

    Exactly one of ``cron`` (a cron expression, 5 fields or 6 with seconds first, read in
    ``timezone``, an IANA name) and ``every`` (whole seconds >= 1, or a ``timedelta``: the
    ticks are the multiples of it since the Unix epoch) is given. ``catch_up`` says what
    happens to ticks missed while no relay ran: ``"latest"`` (one execution for them),
    ``"all"`` or ``"skip"``. Call it at import time of a module that is imported in every
    process (an installed app's ``workflows`` or ``schedules`` module). Bad input raises
    ``ScheduleError`` (its ``field`` names the argument) and registers nothing; a name
    defined elsewhere raises ``ImproperlyConfigured``; a re-import re-registers.
    """
    definition = ScheduleDefinition.build(
        name,
        workflow,
        cron=cron,
        every=every,
        timezone=timezone,
        args=args,
        kwargs=kwargs,
        catch_up=catch_up,
    )
    origin = _origin()
    with _lock:
        existing = _registry.get(name)
        if existing is not None and existing[1] != origin and existing[0] != definition:
            raise ImproperlyConfigured(
                f"A schedule named {name!r} is already defined at {existing[1][0]}:"
                f"{existing[1][1]}; schedule names must be unique."
            )
        _registry[name] = (definition, origin)
    return definition


def get_schedule(name: str) -> ScheduleDefinition | None:
    """The schedule defined in code as ``name``, if any."""
    entry = _registry.get(name)
    return entry[0] if entry else None


def registered_schedules() -> list[ScheduleDefinition]:
    """Every schedule defined in code, by name."""
    return [entry[0] for _, entry in sorted(_registry.items())]


def unregister_schedule(name: str) -> None:
    """Forget a schedule defined in code (for tests that define throwaway ones)."""
    with _lock:
        _registry.pop(name, None)
