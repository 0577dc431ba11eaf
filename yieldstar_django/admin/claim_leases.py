"""The claim lease admin: live leased claims with their holders; "release now" (after a
confirmation page) hands the selected held leases back through their store's ``release``:
the ticked rows, or every held lease the list selects when the user chose "Select all"
(``select_across``, which the confirmation page carries to the confirming post).

The "dead-lettered" filter lists the values a store with ``max_deliveries`` sent to its
``dead_letter``; "requeue" (after a confirmation page) takes the selected ones back
through the store's ``requeue`` callback, a compare-and-swap store update
(:func:`~yieldstar_django.runtime.claim_leases.requeue`).

A definition's ``permission`` hook narrows it as it narrows the store admin: the leases of
a store name it hides are not listed, a lease's page needs the hook to let the user view
its store (the list shows its value only then), and "release now", a write to the
leases' stores, needs it to let the user change each of them. A lease names its holder:
the list and a lease's page need the view permission on executions too, and a
workflow's hook hides the leases of the executions it hides."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, Final

from django.contrib import admin, messages
from django.contrib.admin.utils import quote
from django.db.models import QuerySet
from django.db.models.functions import Substr
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..api.permissions import any_execution_hook, execution_hook_allows, execution_permission
from ..models.claim_leases import ClaimLeaseRecord, ClaimLeaseState
from ..models.runtime import Execution
from ..runtime.claim_leases import release_now, requeue
from .base import (
    CONFIRM_SHOWN,
    OperateActionsMixin,
    ReadOnlyAdminMixin,
    RefuseNulMixin,
    StoreHookMixin,
    confirm_action,
    hook_allows,
    per_store_hooks,
)
from .display import decoded, short_json

#: Characters of each claimed value the confirmation page of "release now" shows (its
#: first ones, as stored): it fetches no more of a value than that.
CONFIRM_VALUE_CHARS: Final = 120


def shown_values(queryset: QuerySet[ClaimLeaseRecord]) -> list[ClaimLeaseRecord]:
    """The first leases a confirmation page lists, each with the head of its value only."""
    return list(
        queryset.defer("value_json").annotate(
            value_head=Substr("value_json", 1, CONFIRM_VALUE_CHARS + 1)
        )[:CONFIRM_SHOWN]
    )


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
class ClaimLeaseAdmin(
    RefuseNulMixin,
    OperateActionsMixin,
    ReadOnlyAdminMixin,
    StoreHookMixin,
    admin.ModelAdmin,  # type: ignore[type-arg]
):
    """Leased claims, soonest expiry first. Action "release now" needs the change
    permission on executions (and the hook's leave to change the leases' stores) and a
    confirmation."""

    list_display = ["store", "holder", "value", "state", "delivery", "expires_at", "created_at"]
    list_filter = [LiveFilter]
    list_per_page = 100
    actions = ["release_now", "requeue"]
    fields = readonly_fields = (
        "id", "execution_id", "step_key", "store_name", "store_id", "value_json", "state",
        "delivery", "expires_at", "created_at", "ended_at",
    )  # fmt: skip

    operate_permission = "yieldstar.change_execution"  # release now, requeue
    store_name_field = "store_name"

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        return [self.value_column(request) if f == "value" else f for f in self.list_display]

    @admin.display(description="store")
    def store(self, obj: ClaimLeaseRecord) -> str:
        return f"{obj.store_name}/{obj.store_id}"

    @admin.display(description="holder")
    def holder(self, obj: ClaimLeaseRecord) -> SafeString:
        url = reverse("admin:yieldstar_execution_change", args=[quote(obj.execution_id)])
        return format_html('<a href="{}">{}</a> · {}', url, obj.execution_id, obj.step_key)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """A lease names its holder: it needs the view permission on executions too, and
        the leave of the holder's workflow hook (and of its store's)."""
        allowed = bool(super().has_view_permission(request, obj)) and bool(
            request.user.has_perm(execution_permission("view"))
        )
        if allowed and obj is not None:
            return len(self.visible_rows(request, [obj])) == 1
        return allowed

    def may_hide_rows(self, request: HttpRequest) -> bool:
        return per_store_hooks(request) or any_execution_hook()

    def visible_rows(
        self, request: HttpRequest, rows: list[ClaimLeaseRecord]
    ) -> list[ClaimLeaseRecord]:
        """The leases of ``rows`` whose store the store hook and whose holder the
        workflow hook let the user view (the hooked holders read at once)."""
        rows = [r for r in rows if self.row_visible(request, r)]
        if not any_execution_hook():
            return rows
        holders = Execution.objects.in_bulk({r.execution_id for r in rows})
        return [
            r
            for r in rows
            if r.execution_id in holders
            and execution_hook_allows(request, "view", holders[r.execution_id])
        ]

    def value_column(self, request: HttpRequest) -> Callable[[ClaimLeaseRecord], str]:
        """The value column: a lease's value, when the hook lets the user view its store."""
        allowed: dict[tuple[str, str], bool] = {}

        @admin.display(description="value")
        def value(obj: ClaimLeaseRecord) -> str:
            key = (obj.store_name, obj.store_id)
            if key not in allowed:
                allowed[key] = self.store_hook_allows(request, obj, "view")
            return short_json(decoded(obj.value_json)) if allowed[key] else "(hidden)"

        return value

    @admin.action(description="Release now (hand the value back)", permissions=["operate"])
    def release_now(
        self, request: HttpRequest, queryset: QuerySet[ClaimLeaseRecord]
    ) -> TemplateResponse | None:
        held = queryset.filter(state=ClaimLeaseState.HELD)
        rows = list(held.values_list("pk", "store_name", "store_id"))
        refused = self.refused_stores(request, [(name, store_id) for _, name, store_id in rows])
        if refused:
            self.message_user(request, refusal_message(refused), messages.ERROR)
            return None
        if request.POST.get("post") != "yes":
            return confirm_action(
                self,
                request,
                "yieldstar_django/admin/claim_lease_release_confirm.html",
                action="release_now",
                shown=shown_values(held),
                count=len(rows),
                title="Release these leases now?",
                action_label="Release now",
                noun="held lease",
                none_left="None of the selected leases is held any more.",
                submit_label="Yes, release them",
            )
        ids = [pk for pk, *_ in rows]
        released = release_now(ids)
        self.message_user(
            request,
            f"Released {released} lease(s); {len(ids) - released} had already ended or failed.",
            messages.SUCCESS if released == len(ids) else messages.WARNING,
        )
        return None

    @admin.action(description="Requeue (take the dead letter back)", permissions=["operate"])
    def requeue(
        self, request: HttpRequest, queryset: QuerySet[ClaimLeaseRecord]
    ) -> TemplateResponse | None:
        dead = queryset.filter(state=ClaimLeaseState.DEAD_LETTERED)
        rows = list(dead.values_list("pk", "store_name", "store_id"))
        refused = self.refused_stores(request, [(name, store_id) for _, name, store_id in rows])
        if refused:
            self.message_user(request, refusal_message(refused, "requeued"), messages.ERROR)
            return None
        if request.POST.get("post") != "yes":
            return confirm_action(
                self,
                request,
                "yieldstar_django/admin/claim_lease_requeue_confirm.html",
                action="requeue",
                shown=shown_values(dead),
                count=len(rows),
                title="Requeue these dead letters?",
                action_label="Requeue",
                noun="dead-lettered value",
                none_left="None of the selected leases is dead-lettered any more.",
                submit_label="Yes, requeue them",
            )
        ids = [pk for pk, *_ in rows]
        done = requeue(ids)
        self.message_user(
            request,
            f"Requeued {done} value(s); {len(ids) - done} had been requeued already or "
            "failed (see the log).",
            messages.SUCCESS if done == len(ids) else messages.WARNING,
        )
        return None

    def refused_stores(
        self, request: HttpRequest, stores: list[tuple[str, str]]
    ) -> dict[tuple[str, str], int]:
        """Of the leases' ``(store name, store id)``, the stores whose hook does not let
        the user change them, each with its number of leases."""
        return {
            key: n
            for key, n in sorted(Counter(stores).items())
            if not hook_allows(request, key[0], "change", key[1])
        }


def refusal_message(refused: dict[tuple[str, str], int], done: str = "released") -> str:
    """What "release now" (or "requeue") says when the hook does not let the user change
    some stores."""
    names = [f"{name}/{store_id}" for name, store_id in refused]
    shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
    return (
        f"You may not change the store of {sum(refused.values())} selected lease(s) "
        f"({shown}): nothing was {done}. Deselect them and try again."
    )
