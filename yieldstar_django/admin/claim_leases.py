"""The claim lease admin: live leased claims with their holders; "release now" (after a
confirmation page) hands the selected held leases back through their store's ``release``."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import quote
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..models.claim_leases import ClaimLeaseRecord, ClaimLeaseState
from ..runtime.claim_leases import release_now
from .base import OperateActionsMixin, ReadOnlyAdminMixin, RefuseNulMixin
from .display import short_json


class LiveFilter(admin.SimpleListFilter):
    """Held leases by default (the live ones); every state on request."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("all", "all"), *ClaimLeaseState.choices]

    def choices(self, changelist: Any) -> Any:
        for value, label in self.lookup_choices:
            yield {
                "selected": (self.value() or ClaimLeaseState.HELD) == value,
                "query_string": changelist.get_query_string({self.parameter_name: value}),
                "display": label,
            }

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value() or ClaimLeaseState.HELD
        return queryset if value == "all" else queryset.filter(state=value)


@admin.register(ClaimLeaseRecord)
class ClaimLeaseAdmin(RefuseNulMixin, OperateActionsMixin, ReadOnlyAdminMixin, admin.ModelAdmin):  # type: ignore[type-arg]
    """Leased claims, soonest expiry first. Action "release now" needs the change
    permission on executions and a confirmation."""

    list_display = ["store", "holder", "short_value", "state", "expires_at", "created_at"]
    list_filter = [LiveFilter]
    list_per_page = 100
    actions = ["release_now"]
    fields = readonly_fields = (
        "id", "execution_id", "step_key", "store_name", "store_id", "value_json", "state",
        "expires_at", "created_at", "ended_at",
    )  # fmt: skip

    operate_permission = "yieldstar.change_execution"  # release now

    @admin.display(description="store")
    def store(self, obj: ClaimLeaseRecord) -> str:
        return f"{obj.store_name}/{obj.store_id}"

    @admin.display(description="holder")
    def holder(self, obj: ClaimLeaseRecord) -> SafeString:
        url = reverse("admin:yieldstar_execution_change", args=[quote(obj.execution_id)])
        return format_html('<a href="{}">{}</a> · {}', url, obj.execution_id, obj.step_key)

    @admin.display(description="value")
    def short_value(self, obj: ClaimLeaseRecord) -> str:
        return short_json(obj.value)

    @admin.action(description="Release now (hand the value back)", permissions=["operate"])
    def release_now(
        self, request: HttpRequest, queryset: QuerySet[ClaimLeaseRecord]
    ) -> TemplateResponse | None:
        held = queryset.filter(state=ClaimLeaseState.HELD)
        if request.POST.get("post") != "yes":
            context = {
                **self.admin_site.each_context(request),
                "title": "Release these leases now?",
                "opts": self.model._meta,
                "leases": list(held[:200]),
                "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
            }
            return TemplateResponse(
                request, "yieldstar_django/admin/claim_lease_release_confirm.html", context
            )
        ids = list(held.values_list("pk", flat=True))
        released = release_now(ids)
        self.message_user(
            request,
            f"Released {released} lease(s); {len(ids) - released} had already ended or failed.",
            messages.SUCCESS if released == len(ids) else messages.WARNING,
        )
        return None
