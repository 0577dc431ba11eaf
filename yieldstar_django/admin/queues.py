"""The queue admin: each queue with its depth, running executions, oldest waiting start
and rate use; pause and resume (with the change permission on executions)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from ..models.runtime import QueueState
from ..runtime.queues import QueueStats, queue_stats, set_paused
from .base import OperateActionsMixin, ReadOnlyAdminMixin


@admin.register(QueueState)
class QueueAdmin(OperateActionsMixin, ReadOnlyAdminMixin, admin.ModelAdmin):  # type: ignore[type-arg]
    """Queues by name (one row per queue that had a start, or was paused). Actions: pause
    (admit nothing more; running executions go on) and resume (admit again at once)."""

    list_display = (
        "name",
        "paused",
        "depth",
        "running",
        "concurrency",
        "oldest_waiting",
        "rate_use",
    )
    ordering = ["name"]
    actions = ["pause_queues", "resume_queues"]
    readonly_fields = list_display
    fields = list_display
    operate_permission = "yieldstar.change_execution"

    def stats(self, obj: QueueState) -> QueueStats:
        cache: dict[str, QueueStats] = obj.__dict__.setdefault("_stats", {})
        if obj.name not in cache:
            cache[obj.name] = queue_stats(obj.name)
        return cache[obj.name]

    @admin.display(description="depth (queued)")
    def depth(self, obj: QueueState) -> int:
        return obj.waiting

    @admin.display(description="oldest waiting")
    def oldest_waiting(self, obj: QueueState) -> str:
        oldest = self.stats(obj).oldest_waiting
        if oldest is None:
            return "-"
        return f"{oldest:%Y-%m-%d %H:%M:%S} ({(timezone.now() - oldest).total_seconds():.0f} s)"

    @admin.display(description="rate use")
    def rate_use(self, obj: QueueState) -> str:
        stats = self.stats(obj)
        if stats.rate_used is None:
            return "-"
        return f"{stats.rate_used} / {stats.rate_limit} in {obj.rate_seconds:g} s"

    def _set(self, request: HttpRequest, queryset: QuerySet[QueueState], paused: bool) -> None:
        changed = sum(
            1 for name in queryset.values_list("name", flat=True) if set_paused(name, paused)
        )
        verb = "paused" if paused else "resumed"
        self.message_user(request, f"{changed} queue(s) {verb}.", messages.SUCCESS)

    @admin.action(description="Pause selected queues", permissions=["operate"])
    def pause_queues(self, request: HttpRequest, queryset: QuerySet[QueueState]) -> None:
        self._set(request, queryset, True)

    @admin.action(description="Resume selected queues", permissions=["operate"])
    def resume_queues(self, request: HttpRequest, queryset: QuerySet[QueueState]) -> None:
        self._set(request, queryset, False)
