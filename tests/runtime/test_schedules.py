"""Schedules: ``define_schedule`` and ``create_schedule`` refuse bad input and store
nothing; ticks start one execution each (id from the schedule and the tick), with the
schedule recorded; the catch-up policies after an outage; daylight-saving days in the
schedule's time zone; pause, resume and trigger; relays racing on one tick in several
processes start it once."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.core.exceptions import ImproperlyConfigured

from tests.shared import race_workflows  # noqa: F401  (the children's workflows)
from tests.shared.fixtures import Spawn, WakeCollector, configure
from tests.shared.outside import runtime_on
from yieldstar_django import (
    ScheduleError,
    UnknownScheduleError,
    clock,
    create_schedule,
    define_schedule,
    pause_schedule,
    resume_schedule,
    trigger_schedule,
)
from yieldstar_django.models import Execution, Schedule
from yieldstar_django.runtime import workflow
from yieldstar_django.runtime.schedule_specs import (
    ScheduleDefinition,
    registered_schedules,
    tick_execution_id,
    unregister_schedule,
)
from yieldstar_django.runtime.schedules import TICKS_PER_ROUND, fire_due_schedules
from yieldstar_django.testing import advance_time

_names = itertools.count()
NEW_YORK = ZoneInfo("America/New_York")


def unique(prefix: str = "sched") -> str:
    return f"{prefix}-{next(_names)}"


@workflow("ys-sched-report")
def report(step: Any, label: str = "daily") -> Any:
    """What a scheduled workflow does: one recorded step, its label back."""
    yield from step.run(str, label)
    return label


@pytest.fixture
def names() -> Iterator[list[str]]:
    """Schedule names a test defines in code: forgotten afterwards."""
    defined: list[str] = []
    yield defined
    for name in defined:
        unregister_schedule(name)


def define(names: list[str], **options: Any) -> str:
    name = unique()
    names.append(name)
    define_schedule(name, report, **options)
    return name


def align_clock(period: int, phase: int) -> None:
    """Move the clock (without firing anything) so that now is ``phase`` seconds past a
    multiple of ``period`` since the epoch."""
    now = clock.now().timestamp()
    clock.advance((phase - now % period) % period)


def scheduled(name: str) -> list[Execution]:
    return list(Execution.objects.filter(schedule=name).order_by("id"))


# --- bad input ---------------------------------------------------------------------------------

BAD = [
    ({"cron": "61 * * * *"}, "cron"),
    ({"cron": "* * *"}, "cron"),
    ({"cron": "not a cron"}, "cron"),
    ({"cron": ""}, "cron"),
    ({"cron": "0 * * * *", "every": 60}, "cron"),
    ({}, "cron"),
    ({"every": 0}, "every"),
    ({"every": -5}, "every"),
    ({"every": 1.5}, "every"),
    ({"every": float("nan")}, "every"),
    ({"every": "60"}, "every"),
    ({"every": timedelta(milliseconds=500)}, "every"),
    ({"every": 60, "timezone": "Mars/Olympus"}, "timezone"),
    ({"every": 60, "timezone": ""}, "timezone"),
    ({"every": 60, "timezone": "../../etc/passwd"}, "timezone"),
    ({"every": 60, "catch_up": "sometimes"}, "catch_up"),
    ({"every": 60, "args": ("a", "b", "c")}, "args"),
    ({"every": 60, "kwargs": {"nope": 1}}, "args"),
    ({"every": 60, "args": (float("inf"),)}, "args"),
    ({"every": 60, "args": "abc"}, "args"),
]


@pytest.mark.parametrize(("options", "field"), BAD)
def test_define_schedule_refuses_bad_input_and_registers_nothing(
    options: dict[str, Any], field: str, names: list[str]
) -> None:
    before = registered_schedules()
    name = unique()
    names.append(name)
    with pytest.raises(ScheduleError) as caught:
        define_schedule(name, report, **options)
    assert caught.value.field == field, caught.value
    assert registered_schedules() == before


@pytest.mark.django_db
@pytest.mark.parametrize(("options", "field"), BAD)
def test_create_schedule_refuses_bad_input_and_stores_nothing(
    options: dict[str, Any], field: str
) -> None:
    with pytest.raises(ScheduleError) as caught:
        create_schedule(unique(), "ys-sched-report", **options)
    assert caught.value.field == field
    assert not Schedule.objects.exists()


@pytest.mark.django_db
def test_create_schedule_refuses_an_unknown_workflow_and_a_taken_name() -> None:
    with pytest.raises(ScheduleError) as caught:
        create_schedule(unique(), "ys-no-such-workflow", every=60)
    assert caught.value.field == "workflow"
    name = unique()
    create_schedule(name, "ys-sched-report", every=60)
    with pytest.raises(ScheduleError) as caught:
        create_schedule(name, "ys-sched-report", every=120)
    assert caught.value.field == "name"
    assert list(Schedule.objects.values_list("name", "every_seconds")) == [(name, 60)]


def test_a_schedule_name_defined_in_two_places_is_refused(names: list[str]) -> None:
    name = define(names, every=60)
    with pytest.raises(ImproperlyConfigured):
        define_schedule(name, report, every=120)


# --- ticks ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_each_tick_starts_one_execution_named_by_the_schedule_and_the_tick(
    yieldstar: Any, names: list[str]
) -> None:
    align_clock(60, 30)
    name = define(names, every=60, args=("weekly",))
    for _ in range(3):
        advance_time(60)  # a tick, on time
    yieldstar.run_until_idle()
    executions = scheduled(name)
    assert len(executions) == 3
    for execution in executions:
        assert execution.status == "completed" and execution.result == "weekly"
    ticks = sorted(
        datetime.fromisoformat(e.id[len(f"schedule:{name}:") :].replace("Z", "+00:00"))
        for e in executions
    )
    assert [t.timestamp() % 60 for t in ticks] == [0, 0, 0]
    assert [(b - a).total_seconds() for a, b in itertools.pairwise(ticks)] == [60, 60]
    assert [e.id for e in executions] == [tick_execution_id(name, t) for t in ticks]
    row = Schedule.objects.get(name=name)
    assert row.in_code and row.ticks == 3 and row.last_tick_at == ticks[-1]
    assert row.next_tick_at == ticks[-1] + timedelta(seconds=60)
    # A round with nothing due fires nothing, and firing again never repeats a tick.
    assert fire_due_schedules() == 0
    assert len(scheduled(name)) == 3


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("catch_up", "runs", "missed"), [("all", 10, 0), ("latest", 1, 9), ("skip", 0, 10)]
)
def test_missed_ticks_follow_the_catch_up_policy(
    catch_up: str, runs: int, missed: int, yieldstar: Any, names: list[str]
) -> None:
    """Ten hourly ticks missed (the clock moved ten hours with no relay): ``all`` runs each,
    ``latest`` one (the latest), ``skip`` none; then the next tick runs on time."""
    align_clock(3600, 1800)
    name = define(names, every=3600, catch_up=catch_up)
    advance_time(10 * 3600)
    yieldstar.run_until_idle()
    executions = scheduled(name)
    assert len(executions) == runs
    row = Schedule.objects.get(name=name)
    assert row.missed == missed and row.ticks == runs
    if catch_up == "latest":
        latest = row.next_tick_at - timedelta(hours=1)
        assert [e.id for e in executions] == [tick_execution_id(name, latest)]
    advance_time(1830)  # 30 s past the next tick: on time
    assert len(scheduled(name)) == runs + 1


@pytest.mark.django_db
def test_all_fires_a_long_backlog_in_batches_each_tick_once(
    yieldstar: Any, names: list[str]
) -> None:
    align_clock(60, 30)
    name = define(names, every=60, catch_up="all")
    advance_time(60 * (TICKS_PER_ROUND * 2 + 5))
    ids = [e.id for e in scheduled(name)]
    assert len(ids) == len(set(ids)) == TICKS_PER_ROUND * 2 + 5


@pytest.mark.django_db
def test_a_grace_period_keeps_late_ticks_on_time() -> None:
    """``SCHEDULE_GRACE``: a tick later than it is missed (``skip`` drops it); within it,
    on time."""
    definition = ScheduleDefinition.build("g", "ys-sched-report", every=60, catch_up="skip")
    from yieldstar_django.runtime.schedules import _plan

    due = datetime(2030, 1, 1, 0, 1, tzinfo=UTC)
    with configure(SCHEDULE_GRACE=120):
        plan = _plan(definition, due, due + timedelta(seconds=90))
        assert plan.ticks == [due, due + timedelta(seconds=60)] and plan.missed == 0
    with configure(SCHEDULE_GRACE=10):
        plan = _plan(definition, due, due + timedelta(seconds=90))
        assert plan.ticks == [] and plan.missed == 2
        assert plan.next_tick == due + timedelta(seconds=120)


# --- daylight-saving changes ---------------------------------------------------------------


def next_change(forward: bool) -> datetime:
    """The local midnight (New York) of the next day whose clocks go forward (or back)."""
    day = clock.now().astimezone(NEW_YORK).replace(hour=0, minute=0, second=0, microsecond=0)
    day = day + timedelta(days=1)
    while True:
        start = datetime(day.year, day.month, day.day, tzinfo=NEW_YORK)
        following = start + timedelta(days=1)
        end = datetime(following.year, following.month, following.day, tzinfo=NEW_YORK)
        hours = (end.astimezone(UTC) - start.astimezone(UTC)).total_seconds() / 3600
        if hours == (23 if forward else 25):
            return start
        day = following


def local_day_ticks(cron: str, day: datetime) -> list[datetime]:
    definition = ScheduleDefinition.build(
        "dst", "ys-sched-report", cron=cron, timezone="America/New_York"
    )
    following = day + timedelta(days=1)
    end = datetime(following.year, following.month, following.day, tzinfo=NEW_YORK)
    return definition.ticks_between(day, end - timedelta(microseconds=1), 1000)


@pytest.mark.parametrize(
    ("cron", "spring", "autumn"),
    [
        ("0 * * * *", 23, 25),  # hourly: the skipped hour has no tick, the repeated one two
        ("*/30 * * * *", 46, 50),
        ("30 2 * * *", 1, 1),  # 02:30 does not exist in spring: it runs at 03:00
        ("30 1 * * *", 1, 1),  # 01:30 happens twice in autumn: it runs once
        ("0 9 * * *", 1, 1),
    ],
)
def test_cron_ticks_follow_the_local_clock_on_daylight_saving_days(
    cron: str, spring: int, autumn: int
) -> None:
    for forward, expected in ((True, spring), (False, autumn)):
        day = next_change(forward)
        ticks = local_day_ticks(cron, day)
        assert len(ticks) == expected, (cron, forward, ticks)
        assert ticks == sorted(set(ticks))  # distinct instants: distinct execution ids


def test_a_time_skipped_by_the_spring_change_runs_right_after_it() -> None:
    day = next_change(forward=True)
    [tick] = local_day_ticks("30 2 * * *", day)
    local = tick.astimezone(NEW_YORK)
    assert (local.hour, local.minute) == (3, 0)
    [nine] = local_day_ticks("0 9 * * *", day)
    assert nine.astimezone(NEW_YORK).hour == 9  # 13:00 UTC now, 14:00 the day before
    before = local_day_ticks("0 9 * * *", day - timedelta(days=1))
    assert (before[0].astimezone(UTC).hour - nine.astimezone(UTC).hour) % 24 == 1


def test_an_hour_repeated_by_the_autumn_change_runs_a_fixed_time_once() -> None:
    day = next_change(forward=False)
    [tick] = local_day_ticks("30 1 * * *", day)
    assert tick.astimezone(NEW_YORK).utcoffset() == timedelta(hours=-4)  # the first 01:30
    hourly = local_day_ticks("0 * * * *", day)
    ones = [t for t in hourly if t.astimezone(NEW_YORK).hour == 1]
    assert [t.astimezone(UTC).hour for t in ones] == [5, 6]  # 01:00 EDT, then 01:00 EST


@pytest.mark.django_db
@pytest.mark.parametrize("forward", [True, False], ids=["spring", "autumn"])
def test_an_hourly_schedule_runs_each_tick_once_through_a_daylight_saving_day(
    forward: bool, yieldstar: Any, names: list[str]
) -> None:
    """Fired by the relay's path (``advance_time``) through the day, an hour at a time."""
    day = next_change(forward)
    # 23:00:30 the day before: every step of an hour then ends 30 s after a tick (on time)
    clock.advance((day - clock.now()).total_seconds() - 3600 + 30)
    name = define(names, cron="0 * * * *", timezone="America/New_York", catch_up="skip")
    for _ in range(25 if not forward else 23):
        advance_time(3600)
    executions = scheduled(name)
    assert len(executions) == (23 if forward else 25)
    assert len({e.id for e in executions}) == len(executions)
    assert Schedule.objects.get(name=name).missed == 0


# --- pause, resume, trigger ------------------------------------------------------------


@pytest.mark.django_db
def test_a_paused_schedule_fires_nothing_and_resumes_from_its_next_tick(
    yieldstar: Any,
) -> None:
    align_clock(60, 30)
    name = unique()
    create_schedule(name, "ys-sched-report", every=60, catch_up="all")
    pause_schedule(name)
    advance_time(300)
    assert scheduled(name) == []
    resume_schedule(name)
    assert scheduled(name) == []  # the paused ticks are not caught up
    row = Schedule.objects.get(name=name)
    assert not row.paused and row.next_tick_at > clock.now()
    advance_time(60)
    assert len(scheduled(name)) == 1


@pytest.mark.django_db
def test_trigger_starts_one_execution_now_and_leaves_the_ticks_alone(yieldstar: Any) -> None:
    name = unique()
    create_schedule(name, "ys-sched-report", every=3600, kwargs={"label": "now"})
    before = Schedule.objects.get(name=name).next_tick_at
    execution_id = trigger_schedule(name)
    assert execution_id.startswith(f"schedule:{name}:now:")
    yieldstar.run_until_idle()
    execution = Execution.objects.get(pk=execution_id)
    assert execution.schedule == name and execution.result == "now"
    assert Schedule.objects.get(name=name).next_tick_at == before


@pytest.mark.django_db
def test_unknown_schedule_names_raise() -> None:
    for call in (pause_schedule, resume_schedule, trigger_schedule):
        with pytest.raises(UnknownScheduleError):
            call("no-such-schedule")


# --- racing relays ---------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_relays_racing_in_several_processes_start_each_tick_once(
    spawn: Spawn, wakes: WakeCollector
) -> None:
    """Four processes fire one schedule's 250 due ticks together, round after round:
    every tick starts exactly one execution, and the rounds' counts add up to the ticks
    (no process fired one another fired)."""
    alias = "default"
    name = unique()
    with runtime_on(alias):
        create_schedule(name, "race-other", every=1, catch_up="all")
        start = clock.now().replace(microsecond=0) - timedelta(seconds=249)
        Schedule.objects.filter(name=name).update(next_tick_at=start)
    rounds = spawn("fire_schedule_rounds", [(alias, 6)] * 4)
    fired = sum(sum(r) for r in rounds)
    with runtime_on(alias):
        ids = list(Execution.objects.filter(schedule=name).values_list("id", flat=True))
        row = Schedule.objects.get(name=name)
    assert len(ids) == len(set(ids)) == fired == row.ticks
    assert fired >= 250
    expected = [tick_execution_id(name, start + timedelta(seconds=i)) for i in range(len(ids))]
    assert sorted(ids) == sorted(expected)


@pytest.mark.django_db
def test_a_tick_fired_again_names_the_same_execution(yieldstar: Any) -> None:
    """A tick fired a second time (a relay that read the row before the first fire moved
    it) starts nothing new: its id names the execution the first fire started."""
    from yieldstar_django.models import WakeIntent

    align_clock(60, 30)
    name = unique()
    create_schedule(name, "ys-sched-report", every=60)
    advance_time(60)
    [first] = scheduled(name)
    tick = Schedule.objects.get(name=name).last_tick_at
    Schedule.objects.filter(name=name).update(next_tick_at=tick)
    assert fire_due_schedules() == 1
    assert [e.id for e in scheduled(name)] == [first.id]
    assert WakeIntent.objects.filter(execution_id=first.id, reason="start").count() == 1
