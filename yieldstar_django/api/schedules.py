"""Schedule endpoints: list and create schedules, read one, pause, resume, trigger now.

``GET schedules/`` and ``GET schedules/<name>/`` need ``yieldstar.view_schedule``,
``POST schedules/`` ``add_schedule``, ``POST schedules/<name>/pause/`` and ``.../resume/``
``change_schedule``, and ``POST schedules/<name>/trigger/`` ``trigger_schedule``. A
schedule is created as ``create_schedule`` creates one: bad input is ``400``
``invalid_schedule`` (its ``field`` named) and nothing is stored. The executions a
schedule started are listed by ``GET executions/?schedule=<name>``.
"""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response

from ..core.durable import decode_durable
from ..models.schedules import CatchUp, Schedule
from ..runtime.schedule_specs import MAX_SCHEDULE_NAME_LENGTH, ScheduleError
from ..runtime.schedules import (
    create_schedule,
    pause_schedule,
    resume_schedule,
    trigger_schedule,
)
from .base import YieldstarAPIView
from .exceptions import APIError
from .openapi import errors, operation
from .permissions import APP_LABEL

__all__ = [
    "ScheduleActionView",
    "ScheduleDetailView",
    "ScheduleListView",
    "SchedulePermission",
]


class InvalidSchedule(APIError, code="invalid_schedule"):
    """A schedule that cannot be kept: a bad cron expression, time zone, interval or
    arguments, an unknown workflow, a taken name."""


class SchedulePermission(BasePermission):
    """Authenticated, with ``yieldstar.<action>_schedule`` for the view's
    ``schedule_action``."""

    def has_permission(self, request: Request, view: Any) -> bool:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return False
        return bool(user.has_perm(f"{APP_LABEL}.{view.schedule_action(request)}_schedule"))


class ScheduleSerializer(serializers.Serializer[Any]):
    """A schedule and its state."""

    name = serializers.CharField()
    workflow = serializers.CharField()
    cron = serializers.CharField(help_text="Cron expression; empty for an `every` schedule.")
    every = serializers.IntegerField(allow_null=True, help_text="Interval in seconds.")
    timezone = serializers.CharField()
    args = serializers.ListField(child=serializers.JSONField())
    kwargs = serializers.DictField(child=serializers.JSONField())
    catch_up = serializers.ChoiceField(choices=CatchUp.values)
    paused = serializers.BooleanField()
    in_code = serializers.BooleanField(help_text="Defined with `define_schedule`.")
    next_tick_at = serializers.DateTimeField(allow_null=True)
    last_tick_at = serializers.DateTimeField(allow_null=True)
    last_execution_id = serializers.CharField()
    ticks = serializers.IntegerField(help_text="Executions its ticks started.")
    missed = serializers.IntegerField(help_text="Missed ticks its catch-up started none for.")
    last_error = serializers.CharField()
    executions = serializers.URLField(help_text="Its executions: `executions/?schedule=`.")


class ScheduleListSerializer(serializers.Serializer[Any]):
    """Every schedule, by name."""

    results = ScheduleSerializer(many=True)


class ScheduleCreateSerializer(serializers.Serializer[Any]):
    """A schedule as ``define_schedule`` takes it: exactly one of ``cron`` and ``every``."""

    name = serializers.CharField(max_length=MAX_SCHEDULE_NAME_LENGTH)
    workflow = serializers.CharField(max_length=255)
    cron = serializers.CharField(required=False, allow_null=True, default=None)
    every = serializers.IntegerField(required=False, allow_null=True, default=None)
    timezone = serializers.CharField(required=False, default="UTC")
    args = serializers.ListField(child=serializers.JSONField(), required=False, default=list)
    kwargs = serializers.DictField(child=serializers.JSONField(), required=False, default=dict)
    catch_up = serializers.ChoiceField(choices=CatchUp.values, required=False, default="latest")
    paused = serializers.BooleanField(required=False, default=False)


class TriggeredSerializer(serializers.Serializer[Any]):
    """The execution "trigger now" started."""

    id = serializers.CharField()
    url = serializers.URLField()


def _url(request: Request, name: str, *args: str) -> str:
    namespace = request.resolver_match.namespace if request.resolver_match else ""
    full = f"{namespace}:{name}" if namespace else name
    return request.build_absolute_uri(reverse(full, args=list(args)))


def schedule_body(request: Request, row: Schedule) -> dict[str, Any]:
    value = decode_durable(row.input_json)
    executions = _url(request, "execution-list")
    return {
        "name": row.name,
        "workflow": row.workflow_id,
        "cron": row.cron,
        "every": row.every_seconds,
        "timezone": row.timezone,
        "args": value.get("args", []),
        "kwargs": value.get("kwargs", {}),
        "catch_up": row.catch_up,
        "paused": row.paused,
        "in_code": row.in_code,
        "next_tick_at": row.next_tick_at,
        "last_tick_at": row.last_tick_at,
        "last_execution_id": row.last_execution_id,
        "ticks": row.ticks,
        "missed": row.missed,
        "last_error": row.last_error,
        "executions": f"{executions}?{_query(row.name)}",
    }


def _query(name: str) -> str:
    from urllib.parse import urlencode

    return urlencode({"schedule": name})


def schedule_or_404(name: str) -> Schedule:
    row = None
    if len(name) <= MAX_SCHEDULE_NAME_LENGTH and "\x00" not in name:
        row = Schedule.objects.filter(name=name).first()
    if row is None:
        raise NotFound("There is no such schedule.")
    return row


class ScheduleListView(YieldstarAPIView):
    """``GET schedules/``: every schedule; ``POST schedules/``: create one."""

    permission_classes = [SchedulePermission]

    def schedule_action(self, request: Request) -> str:
        return "add" if request.method == "POST" else "view"

    @operation(
        "schedules_list",
        "List schedules",
        "Every schedule, by name: those defined in code and those created here or in "
        "the admin, with their state (paused, next and last tick, counts).",
        responses={200: ScheduleListSerializer, **errors(401, 403)},
        tags=["schedules"],
    )
    def get(self, request: Request) -> Response:
        rows = Schedule.objects.order_by("name")
        return Response({"results": [schedule_body(request, row) for row in rows]})

    @operation(
        "schedule_create",
        "Create a schedule",
        "Checked as `define_schedule` checks one (a cron expression, a time zone, an "
        "interval, the workflow's arguments): `400` `invalid_schedule` names what is wrong "
        "and stores nothing; a taken name is `400` too. Its first tick is the next after now.",
        request=ScheduleCreateSerializer,
        responses={201: ScheduleSerializer, **errors(400, 401, 403, 413, 415, 500)},
        tags=["schedules"],
    )
    def post(self, request: Request) -> Response:
        serializer = ScheduleCreateSerializer(data=self.body(request))
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        try:
            row = create_schedule(
                data["name"],
                data["workflow"],
                cron=data["cron"],
                every=data["every"],
                timezone=data["timezone"],
                args=data["args"],
                kwargs=data["kwargs"],
                catch_up=data["catch_up"],
                paused=data["paused"],
            )
        except ScheduleError as exc:
            raise InvalidSchedule(f"{exc.field}: {exc}") from None
        return Response(
            schedule_body(request, row),
            status=status.HTTP_201_CREATED,
            headers={"Location": _url(request, "schedule-detail", row.name)},
        )


class ScheduleDetailView(YieldstarAPIView):
    """``GET schedules/<name>/``: one schedule."""

    permission_classes = [SchedulePermission]

    def schedule_action(self, request: Request) -> str:
        return "view"

    @operation(
        "schedule_detail",
        "Read a schedule",
        "The schedule and its state.",
        responses={200: ScheduleSerializer, **errors(401, 403, 404)},
        tags=["schedules"],
    )
    def get(self, request: Request, name: str) -> Response:
        return Response(schedule_body(request, schedule_or_404(name)))


class ScheduleActionView(YieldstarAPIView):
    """``POST schedules/<name>/pause/``, ``.../resume/``, ``.../trigger/``."""

    permission_classes = [SchedulePermission]
    body_methods = frozenset()
    action = "pause"

    def schedule_action(self, request: Request) -> str:
        return "trigger" if self.action == "trigger" else "change"

    def post(self, request: Request, name: str) -> Response:
        row = schedule_or_404(name)
        if self.action == "pause":
            pause_schedule(row.name)
        elif self.action == "resume":
            resume_schedule(row.name)
        else:
            try:
                execution_id = trigger_schedule(row.name)
            except ScheduleError as exc:
                raise InvalidSchedule(f"{exc.field}: {exc}") from None
            return Response(
                {"id": execution_id, "url": _url(request, "execution-detail", execution_id)},
                status=status.HTTP_201_CREATED,
            )
        return Response(schedule_body(request, schedule_or_404(name)))


class SchedulePauseView(ScheduleActionView):
    """``POST schedules/<name>/pause/``: no tick fires until it is resumed (idempotent)."""

    action = "pause"

    @operation(
        "schedule_pause",
        "Pause a schedule",
        "No tick fires until it is resumed. Pausing a paused schedule is a no-op.",
        request=None,
        responses={200: ScheduleSerializer, **errors(401, 403, 404, 415)},
        tags=["schedules"],
    )
    def post(self, request: Request, name: str) -> Response:
        return super().post(request, name)


class ScheduleResumeView(ScheduleActionView):
    """``POST schedules/<name>/resume/``: ticks fire again from the next after now."""

    action = "resume"

    @operation(
        "schedule_resume",
        "Resume a schedule",
        "Ticks fire again from the next one after now: the ticks of the pause are not "
        "caught up. Resuming a running schedule is a no-op.",
        request=None,
        responses={200: ScheduleSerializer, **errors(401, 403, 404, 415)},
        tags=["schedules"],
    )
    def post(self, request: Request, name: str) -> Response:
        return super().post(request, name)


class ScheduleTriggerView(ScheduleActionView):
    """``POST schedules/<name>/trigger/``: start the workflow now."""

    action = "trigger"

    @operation(
        "schedule_trigger",
        "Trigger a schedule now",
        "Starts the schedule's workflow now (paused or not), as an execution named "
        "`schedule:<name>:now:<time>`; its ticks are unchanged.",
        request=None,
        responses={201: TriggeredSerializer, **errors(400, 401, 403, 404, 415)},
        tags=["schedules"],
    )
    def post(self, request: Request, name: str) -> Response:
        return super().post(request, name)
