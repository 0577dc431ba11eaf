"""The schedule admin: every schedule with its state (paused, next and last tick, the last
execution it started); schedules created and edited here (checked as ``define_schedule``
checks them: a bad cron expression, time zone or arguments is a form error and nothing is
stored); actions "pause", "resume" and "trigger now". A schedule defined in code is
read-only here but for those actions (the code is its definition). The executions list
filters by schedule (``ScheduleFilter``)."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import quote
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from .. import clock
from ..core.durable import decode_durable
from ..models.schedules import Schedule
from ..runtime.registry import registered_workflows
from ..runtime.schedule_specs import ScheduleDefinition, ScheduleError
from ..runtime.schedules import (
    UnknownScheduleError,
    pause_schedule,
    resume_schedule,
    trigger_schedule,
)

__all__ = ["ScheduleAdmin", "ScheduleFilter", "ScheduleForm"]


class ScheduleFilter(admin.SimpleListFilter):
    """The executions a schedule's ticks (or triggers) started, by schedule name."""

    title = "schedule"
    parameter_name = "schedule"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = Schedule.objects.order_by("name").values_list("name", flat=True)[:200]
        return [(name, name) for name in names]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(schedule=value) if value else queryset


class ScheduleForm(forms.ModelForm):  # type: ignore[type-arg]
    """A schedule as ``define_schedule`` takes it; ``args`` and ``kwargs`` as JSON."""

    workflow_id = forms.ChoiceField(label="workflow", choices=())
    args = forms.CharField(
        initial="[]", required=False, help_text="JSON list of positional arguments."
    )
    kwargs = forms.CharField(
        initial="{}", required=False, help_text="JSON object of keyword arguments."
    )

    class Meta:
        model = Schedule
        fields = ["name", "workflow_id", "cron", "every_seconds", "timezone", "catch_up", "paused"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["workflow_id"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = [(w.name, w.name) for w in registered_workflows()]
        if self.instance.pk:
            value = decode_durable(self.instance.input_json)
            self.initial["args"] = json.dumps(value.get("args", []))
            self.initial["kwargs"] = json.dumps(value.get("kwargs", {}))

    def _json(self, field: str, default: Any) -> Any:
        text = (self.cleaned_data.get(field) or "").strip()
        if not text:
            return default
        try:
            return json.loads(text)
        except ValueError as exc:
            raise forms.ValidationError({field: f"Not JSON: {exc}"}) from None

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        args = self._json("args", [])
        kwargs = self._json("kwargs", {})
        try:
            definition = ScheduleDefinition.build(
                data.get("name"),
                data.get("workflow_id"),
                cron=data.get("cron") or None,
                every=data.get("every_seconds"),
                timezone=data.get("timezone") or "",
                args=args,
                kwargs=kwargs,
                catch_up=data.get("catch_up"),
            )
        except ScheduleError as exc:
            field = {"every": "every_seconds", "workflow": "workflow_id"}.get(exc.field, exc.field)
            if field not in self.fields:
                field = "args" if field in ("args", "kwargs") else None  # type: ignore[assignment]
            raise forms.ValidationError({field: str(exc)} if field else str(exc)) from None
        self.definition = definition
        return data

    def save(self, commit: bool = True) -> Schedule:
        schedule: Schedule = super().save(commit=False)
        definition = self.definition
        schedule.cron = definition.cron
        schedule.every_seconds = definition.every
        schedule.input_json = definition.input_json
        schedule.next_tick_at = definition.next_after(clock.now())
        if commit:
            schedule.save()
        return schedule


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Schedules by name. Created and edited here unless defined in code; "pause" and
    "resume" need the change permission, "trigger now" ``yieldstar.trigger_schedule``."""

    form = ScheduleForm
    list_display = [
        "name", "workflow_id", "when", "catch_up", "paused", "next_tick_at", "last_tick_at",
        "last_execution", "ticks", "missed", "in_code",
    ]  # fmt: skip
    list_filter = ["paused", "in_code", "catch_up"]
    search_fields = ["name", "workflow_id"]
    actions = ["pause", "resume", "trigger_now"]
    readonly_fields = (
        "in_code", "next_tick_at", "last_tick_at", "last_execution", "ticks", "missed",
        "last_error", "created_at", "updated_at",
    )  # fmt: skip

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is not None and obj.in_code:
            return [f.name for f in Schedule._meta.fields if f.name != "id"] + ["last_execution"]
        return self.readonly_fields

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is not None and obj.in_code:
            return self.get_readonly_fields(request, obj)
        return [*ScheduleForm.Meta.fields[:4], "timezone", "args", "kwargs", "catch_up", "paused"]

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        if obj is not None and obj.in_code:
            kwargs["form"] = forms.ModelForm
            kwargs["fields"] = []
        return super().get_form(request, obj, change, **kwargs)

    @admin.display(description="when")
    def when(self, obj: Schedule) -> str:
        if obj.every_seconds is not None:
            return f"every {obj.every_seconds} s"
        return f"{obj.cron} ({obj.timezone})"

    @admin.display(description="last execution")
    def last_execution(self, obj: Schedule) -> SafeString | str:
        if not obj.last_execution_id:
            return "-"
        url = reverse("admin:yieldstar_execution_change", args=[quote(obj.last_execution_id)])
        return format_html('<a href="{}">{}</a>', url, obj.last_execution_id)

    def has_trigger_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm("yieldstar.trigger_schedule"))

    def _each(
        self, request: HttpRequest, queryset: QuerySet[Schedule], act: Any, done: str
    ) -> None:
        count = 0
        for name in queryset.values_list("name", flat=True):
            try:
                act(name)
                count += 1
            except (UnknownScheduleError, ScheduleError) as exc:
                self.message_user(request, f"{name}: {exc}", messages.ERROR)
        self.message_user(request, f"{done} {count} schedule(s).", messages.SUCCESS)

    @admin.action(description="Pause the selected schedules", permissions=["change"])
    def pause(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._each(request, queryset, pause_schedule, "Paused")

    @admin.action(description="Resume the selected schedules", permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._each(request, queryset, resume_schedule, "Resumed")

    @admin.action(description="Trigger now (start each one's workflow)", permissions=["trigger"])
    def trigger_now(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._each(request, queryset, trigger_schedule, "Triggered")
