"""The wake outbox admin: pending and acknowledged wake intents, and "deliver again"."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import ShowFacets
from django.contrib.admin.utils import quote
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..api.permissions import (
    any_execution_hook,
    execution_hook,
    execution_hook_allows,
    execution_permission,
)
from ..core.results import Wake
from ..models.runtime import Execution
from ..models.stores import WakeIntent
from ..wakes import PendingWake, deliver_wakes
from .base import OperateActionsMixin, ReadOnlyAdminMixin, RefuseNulMixin, SearchLookupMixin
from .display import ellipsize


class DeliveredFilter(admin.SimpleListFilter):
    title = "acknowledgement"
    parameter_name = "delivered"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("no", "pending"), ("yes", "acknowledged")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "no":
            return queryset.filter(delivered_at__isnull=True)
        if self.value() == "yes":
            return queryset.filter(delivered_at__isnull=False)
        return queryset


#: The fields of the (read-only) change page.
FIELDS: tuple[str, ...] = (
    "execution_id",
    "workflow_id",
    "reason",
    "due_at",
    "available_at",
    "delivered_at",
    "attempts",
    "last_error",
    "created_at",
)


@admin.register(WakeIntent)
class WakeIntentAdmin(
    RefuseNulMixin,
    SearchLookupMixin,
    OperateActionsMixin,
    ReadOnlyAdminMixin,
    admin.ModelAdmin,  # type: ignore[type-arg]
):
    """Wake intents, newest first. An intent is pending until a run of its execution
    acknowledges it; "deliver again" hands the selected wakes to the ``WAKE_BACKEND`` now
    (a spurious wake is harmless: resuming is idempotent).

    An intent shows an execution's id and workflow, so it is guarded as the execution
    is: the outbox needs ``view_execution`` besides ``view_wakeintent``, a list shows the
    intents whose execution its workflow's hook allows ``"list"``, a page one whose
    execution it allows ``"view"`` (an intent of a hooked workflow whose execution is
    gone is not shown), and "deliver again" needs ``"view"`` of every selected one."""

    list_display = [
        "id",
        "execution_link",
        "workflow_id",
        "reason",
        "deliverable_from",
        "delivered_at",
        "attempts",
        "short_error",
    ]
    list_filter = [DeliveredFilter]
    search_fields = ["execution_id"]
    search_help_text = "The execution id (exact)."
    ordering = ["-id"]
    list_per_page = 100
    search_lookup = "execution_id"
    actions = ["deliver_again"]
    readonly_fields = FIELDS
    fields = FIELDS

    operate_permission = "yieldstar.change_wakeintent"  # deliver again

    @property
    def show_facets(self) -> ShowFacets:  # type: ignore[override]
        """No per-filter counts (``?_facets``) when a hook may hide executions: they
        would count their intents too."""
        return ShowFacets.NEVER if any_execution_hook() else ShowFacets.ALLOW

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        allowed = bool(super().has_view_permission(request, obj)) and bool(
            request.user.has_perm(execution_permission("view"))
        )
        if allowed and obj is not None:
            return len(self.visible_rows(request, [obj], "view")) == 1
        return allowed

    def may_hide_rows(self, request: HttpRequest) -> bool:
        """Whether a workflow's hook may hide rows of the list (it is asked about each)."""
        return any_execution_hook()

    def visible_rows(
        self, request: HttpRequest, rows: list[WakeIntent], action: str = "list"
    ) -> list[WakeIntent]:
        """The intents of ``rows`` whose execution its workflow's hook allows ``action``
        (the executions of hooked workflows read at once)."""
        hooked = {r.workflow_id for r in rows if execution_hook(r.workflow_id) is not None}
        if not hooked:
            return rows
        executions = Execution.objects.in_bulk(
            {r.execution_id for r in rows if r.workflow_id in hooked}
        )
        return [
            r
            for r in rows
            if r.workflow_id not in hooked
            or (
                r.execution_id in executions
                and execution_hook_allows(request, action, executions[r.execution_id])
            )
        ]

    @admin.display(description="execution", ordering="execution_id")
    def execution_link(self, obj: WakeIntent) -> SafeString:
        url = reverse("admin:yieldstar_execution_change", args=[quote(obj.execution_id)])
        return format_html('<a href="{}">{}</a>', url, obj.execution_id)

    @admin.display(description="deliverable from", ordering="available_at")
    def deliverable_from(self, obj: WakeIntent) -> Any:
        """``available_at`` is when the relay may deliver the intent (commit + ``RELAY_DELAY``
        for an immediate wake); the committing process delivers it at once, so an intent
        acknowledged before that time shows "on commit" rather than a time after its
        acknowledgement."""
        if obj.delivered_at is not None and obj.delivered_at < obj.available_at:
            return "on commit"
        return obj.available_at

    @admin.display(description="last error")
    def short_error(self, obj: WakeIntent) -> str:
        return ellipsize(obj.last_error)

    @admin.action(description="Deliver again", permissions=["operate"])
    def deliver_again(self, request: HttpRequest, queryset: QuerySet[WakeIntent]) -> None:
        intents = list(queryset.only("id", "execution_id", "workflow_id"))
        refused = len(intents) - len(self.visible_rows(request, intents, "view"))
        if refused:
            self.message_user(
                request,
                f"You may not view the executions of {refused} of the selected wakes: "
                "nothing was done. Deselect them and try again.",
                messages.ERROR,
            )
            return
        pending = [
            PendingWake(intent.pk, Wake(intent.execution_id, intent.workflow_id))
            for intent in intents
        ]
        if deliver_wakes(pending, using=queryset.db):
            self.message_user(request, f"Delivered {len(pending)} wake(s) again.", messages.SUCCESS)
        else:
            self.message_user(
                request,
                "The wake backend refused the wakes; they stay pending for the relay "
                "(see their last error).",
                messages.ERROR,
            )


__all__ = ["WakeIntentAdmin"]
