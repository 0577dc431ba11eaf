"""Schedules in the database: their rows, their ticks fired by the relay, pause, resume,
trigger now.

Every relay round (``fire_due_schedules``, registered with ``wakes.relay.every_round``)
copies the schedules defined in code into the table when they are new or changed, then
fires the due ones. A schedule row's ``next_tick_at`` is its durable timer. Firing one
is one transaction: the row locked (``FOR UPDATE SKIP LOCKED`` on PostgreSQL: a relay never
waits for another; SQLite's ``BEGIN IMMEDIATE`` serializes writers), checked to be still
due, one execution started per tick it fires (``starts.create_execution``, whose id
``schedule:<name>:<UTC time>Z`` the tick names, so a tick fired twice is the same
execution), and ``next_tick_at`` moved past them. Two relays, or a relay and
``advance_time``, never start a tick twice, and a relay killed mid-way leaves the tick due.

Ticks due longer ago than ``SCHEDULE_GRACE`` are missed; the schedule's ``catch_up``
decides: ``"all"`` fires every one of them (at most ``TICKS_PER_ROUND`` per round),
``"latest"`` only the latest, ``"skip"`` none.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from django.db import IntegrityError, transaction

from .. import clock
from ..conf import database_alias, yieldstar_settings
from ..core.durable import decode_durable
from ..models.schedules import Schedule
from .errors import ExecutionConflictError
from .registry import get_workflow
from .schedule_specs import (
    ScheduleDefinition,
    ScheduleError,
    get_schedule,
    registered_schedules,
    tick_execution_id,
    trigger_execution_id,
)
from .starts import create_execution

__all__ = [
    "TICKS_PER_ROUND",
    "UnknownScheduleError",
    "create_schedule",
    "definition_of",
    "fire_due_schedules",
    "pause_schedule",
    "resume_schedule",
    "sync_code_schedules",
    "trigger_schedule",
]

logger = logging.getLogger("yieldstar_django.schedules")

#: The most ticks one schedule fires in one round (``catch_up="all"`` after a long
#: outage): the rest stay due for the next round.
TICKS_PER_ROUND: Final = 100
#: The most due schedules one round fires.
SCHEDULES_PER_ROUND: Final = 100


class UnknownScheduleError(LookupError):
    """No schedule has this name."""


def definition_of(row: Schedule) -> ScheduleDefinition:
    """The checked definition a row holds (``ScheduleError`` for a row that no longer
    checks: a time zone this machine does not know, say)."""
    value = decode_durable(row.input_json)
    return ScheduleDefinition.build(
        row.name,
        row.workflow_id,
        cron=row.cron or None,
        every=row.every_seconds,
        timezone=row.timezone,
        args=value.get("args", []),
        kwargs=value.get("kwargs", {}),
        catch_up=row.catch_up,
    )


def _fields(definition: ScheduleDefinition) -> dict[str, Any]:
    return {
        "workflow_id": definition.workflow,
        "cron": definition.cron,
        "every_seconds": definition.every,
        "timezone": definition.timezone,
        "input_json": definition.input_json,
        "catch_up": definition.catch_up,
    }


def _now() -> datetime:
    return clock.now()


def sync_code_schedules(using: str | None = None) -> int:
    """Copy the schedules defined in code into the table: insert the new ones (their first
    tick the next after now), update the changed ones (their next tick recomputed from
    now; paused stays as it was). Return how many rows changed. One read when nothing
    changed."""
    defined = registered_schedules()
    if not defined:
        return 0
    alias = database_alias(using)
    names = [d.name for d in defined]
    rows = {
        row.name: row
        for row in Schedule.objects.using(alias)
        .filter(name__in=names)
        .only("name", "in_code", *_fields(defined[0]))
    }
    changed = 0
    now = _now()
    for definition in defined:
        fields = _fields(definition)
        row = rows.get(definition.name)
        if row is None:
            Schedule.objects.using(alias).bulk_create(
                [
                    Schedule(
                        name=definition.name,
                        in_code=True,
                        next_tick_at=definition.next_after(now),
                        **fields,
                    )
                ],
                ignore_conflicts=True,
            )
            changed += 1
        elif not row.in_code:
            logger.warning(
                "schedule %r is defined in code and was created in the database too; the "
                "database's row is kept",
                definition.name,
            )
        elif any(getattr(row, key) != value for key, value in fields.items()):
            Schedule.objects.using(alias).filter(pk=row.pk).update(
                next_tick_at=definition.next_after(now), last_error="", **fields
            )
            changed += 1
    return changed


@dataclass
class _Plan:
    ticks: list[datetime]
    missed: int
    next_tick: datetime | None


def _plan(definition: ScheduleDefinition, due: datetime, now: datetime) -> _Plan:
    """Which ticks from ``due`` (the row's next tick) to ``now`` to fire."""
    cutoff = now - timedelta(seconds=yieldstar_settings.SCHEDULE_GRACE)
    if definition.catch_up == "all" or due >= cutoff:
        ticks = definition.ticks_between(due, now, TICKS_PER_ROUND)
        missed = 0
    else:
        latest_missed = definition.latest_at_or_before(cutoff - timedelta(microseconds=1))
        on_time = definition.ticks_between(cutoff, now, TICKS_PER_ROUND)
        missed = definition.count_between(due, cutoff - timedelta(microseconds=1), 100_000)
        ticks = on_time
        if definition.catch_up == "latest" and latest_missed is not None and latest_missed >= due:
            ticks = [latest_missed, *on_time][:TICKS_PER_ROUND]
            missed -= 1
    if len(ticks) >= TICKS_PER_ROUND:
        next_tick = definition.next_after(ticks[-1])
    else:
        next_tick = definition.next_after(now)
    return _Plan(ticks, max(missed, 0), next_tick)


_unknown_logged: set[str] = set()


def _fire_one(alias: str, pk: int, now: datetime) -> int:
    with transaction.atomic(using=alias):
        row = (
            Schedule.objects.using(alias)
            .select_for_update(skip_locked=True)
            .filter(pk=pk, paused=False, next_tick_at__lte=now)
            .first()
        )
        if row is None or row.next_tick_at is None:
            return 0  # another relay fired it, or it was paused or changed meanwhile
        if row.in_code and get_schedule(row.name) is None:
            return 0  # defined by code this process does not have: left to one that does
        try:
            definition = definition_of(row)
            workflow = get_workflow(definition.workflow)
        except LookupError:
            if row.name not in _unknown_logged:
                _unknown_logged.add(row.name)
                logger.warning(
                    "schedule %r: workflow %r is not registered in this process; its ticks "
                    "wait for a relay that knows it",
                    row.name,
                    row.workflow_id,
                )
            return 0
        except ScheduleError as exc:
            Schedule.objects.using(alias).filter(pk=pk).update(
                next_tick_at=None, last_error=f"{type(exc).__name__}: {exc}"
            )
            return 0
        plan = _plan(definition, row.next_tick_at, now)
        value = decode_durable(definition.input_json)
        error = ""
        last_id = row.last_execution_id
        for tick in plan.ticks:
            execution_id = tick_execution_id(row.name, tick)
            try:
                create_execution(
                    workflow,
                    value["args"],
                    value["kwargs"],
                    execution_id,
                    schedule=row.name,
                )
            except (ExecutionConflictError, TypeError) as exc:
                error = f"{type(exc).__name__}: {exc}"
            last_id = execution_id
        fields: dict[str, Any] = {
            "next_tick_at": plan.next_tick,
            "last_execution_id": last_id,
            "ticks": row.ticks + len(plan.ticks),
            "missed": row.missed + plan.missed,
            "last_error": error,
        }
        if plan.ticks:
            fields["last_tick_at"] = plan.ticks[-1]
        Schedule.objects.using(alias).filter(pk=pk).update(**fields)
        return len(plan.ticks)


def fire_due_schedules(using: str | None = None) -> int:
    """Fire every due schedule's ticks (the relay's upkeep, each round); return how many
    executions the ticks named. Each schedule in a transaction of its own; one that fails
    (logged) is tried again in the next round and does not hold up the others."""
    alias = database_alias(using)
    sync_code_schedules(alias)
    now = _now()
    due = list(
        Schedule.objects.using(alias)
        .filter(paused=False, next_tick_at__lte=now)
        .order_by("next_tick_at")
        .values_list("pk", flat=True)[:SCHEDULES_PER_ROUND]
    )
    fired = 0
    for pk in due:
        try:
            fired += _fire_one(alias, pk, now)
        except Exception:  # one schedule's failure (a corrupt row) never stops the others
            logger.exception("schedule %s: firing its ticks failed; it is tried next round", pk)
    return fired


def _row(name: str, alias: str) -> Schedule:
    row = Schedule.objects.using(alias).select_for_update().filter(name=name).first()
    if row is None:
        raise UnknownScheduleError(f"No schedule named {name!r}")
    return row


def create_schedule(
    name: str,
    workflow: Any,
    *,
    cron: str | None = None,
    every: float | timedelta | None = None,
    timezone: str = "UTC",
    args: Any = (),
    kwargs: dict[str, Any] | None = None,
    catch_up: str = "latest",
    paused: bool = False,
    using: str | None = None,
) -> Schedule:
    """Create a schedule in the database (the admin's and the API's; not in code). The
    arguments are ``define_schedule``'s; its workflow must be registered. ``ScheduleError``
    for bad input or a taken name (nothing stored)."""
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
    try:
        get_workflow(definition.workflow)
    except LookupError as exc:
        raise ScheduleError("workflow", str(exc)) from None
    if get_schedule(definition.name) is not None:
        raise ScheduleError("name", f"A schedule named {name!r} is defined in code")
    alias = database_alias(using)
    try:
        with transaction.atomic(using=alias):
            return Schedule.objects.using(alias).create(
                name=definition.name,
                paused=paused,
                next_tick_at=definition.next_after(_now()),
                **_fields(definition),
            )
    except IntegrityError:
        raise ScheduleError("name", f"A schedule named {name!r} exists") from None


def pause_schedule(name: str, *, using: str | None = None) -> None:
    """Pause a schedule: no tick fires until ``resume_schedule``. ``UnknownScheduleError``
    for a name no schedule has."""
    alias = database_alias(using)
    with transaction.atomic(using=alias):
        row = _row(name, alias)
        Schedule.objects.using(alias).filter(pk=row.pk).update(paused=True)


def resume_schedule(name: str, *, using: str | None = None) -> None:
    """Resume a paused schedule from its next tick after now (the ticks of the pause are
    not caught up)."""
    alias = database_alias(using)
    with transaction.atomic(using=alias):
        row = _row(name, alias)
        if not row.paused:
            return
        try:
            next_tick = definition_of(row).next_after(_now())
        except ScheduleError:
            next_tick = None
        Schedule.objects.using(alias).filter(pk=row.pk).update(paused=False, next_tick_at=next_tick)


def trigger_schedule(name: str, *, using: str | None = None) -> str:
    """Start the schedule's workflow now, out of its ticks (paused or not); return the
    execution's id, ``schedule:<name>:now:<UTC time>Z``. The next tick is unchanged."""
    alias = database_alias(using)
    with transaction.atomic(using=alias):
        row = _row(name, alias)
        definition = definition_of(row)
        try:
            workflow = get_workflow(definition.workflow)
        except LookupError as exc:
            raise ScheduleError("workflow", str(exc)) from None
        value = decode_durable(definition.input_json)
        execution_id, _ = create_execution(
            workflow,
            value["args"],
            value["kwargs"],
            trigger_execution_id(name, _now()),
            schedule=row.name,
        )
        return execution_id
