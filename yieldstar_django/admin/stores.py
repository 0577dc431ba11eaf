"""The store admin: store instances, their versions, waiters and ledger entries.

Read-only by default. A user with the change permission (and whom the definition's
``permission`` hook allows) gets a state editor whose save validates through the
definition's schema and compare-and-swaps on the version the page was opened at
(``update_store_if``, of an existing store only): when someone else changed or deleted the
store meanwhile, nothing is written and the form says so. A store whose definition is
gone, whose state is over ``MAX_EDIT_CHARS``, or whose state is not valid JSON (a row
written by hand or by another program; shown raw), is shown as to a viewer, and an edit
posted to it is refused. Rows are only ever written through the store client.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any, Final

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce, Length
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.safestring import SafeString

from ..api.jsonvalue import copy_json
from ..connector import get_store_client
from ..core.commits import MISSING_INSTANCE, VersionCondition
from ..core.definition import StoreDefinition, get_definition, registered_definitions
from ..core.errors import StoreValidationError, WorkflowValueError, YieldstarError, format_path
from ..core.results import StoreStepId, StoreUpdateConflict
from ..models.stores import AppliedStep, StoreInstance, StoreVersion, Waiter
from ..principals import admin_principal, is_principal
from .base import (
    LargeTableListMixin,
    PageContextMixin,
    RefuseNulMixin,
    SearchLookupMixin,
    StoreHookMixin,
    hook_allows,
)
from .display import (
    Undecodable,
    decode_paths,
    decoded,
    diff_block,
    format_paths,
    pretty_block,
    pretty_json,
    short_json,
)
from .pagination import paginate

#: Largest state (canonical JSON, in characters) the admin offers to edit.
MAX_EDIT_CHARS: Final = 1024 * 1024
#: Largest version state the history loads to show or diff.
MAX_HISTORY_STATE_CHARS: Final = 256 * 1024
VERSIONS_PER_PAGE: Final = 20
LEDGER_PER_PAGE: Final = 20
WAITERS_SHOWN: Final = 100


def admin_step_execution(request: HttpRequest) -> str:
    """The ledger execution id of an admin user's edits: ``admin:<user pk>``."""
    return admin_principal(request.user.pk)


class StoreNameFilter(admin.SimpleListFilter):
    """Filter by store name, listing the registered definitions (no table scan)."""

    title = "store name"
    parameter_name = "name"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            (d.name, d.name)
            for d in registered_definitions()
            if hook_allows(request, d.name, "view", None)
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(name=value) if value else queryset


class StoreStateForm(forms.ModelForm):  # type: ignore[type-arg]
    """The state editor. Its ``clean()`` is the save: a compare-and-swap on the version
    the page was opened at, so schema rejections and conflicts are shown on the form and
    nothing is ever written blindly. ``outcome`` holds the committed result."""

    state_json = forms.CharField(
        label="State (JSON)",
        widget=forms.Textarea(
            attrs={"rows": 20, "class": "yieldstar-editor", "spellcheck": "false"}
        ),
        help_text="Saved only if nobody changed the store since this page was opened.",
    )
    expected_instance_id = forms.CharField(widget=forms.HiddenInput)
    expected_version = forms.IntegerField(widget=forms.HiddenInput, min_value=0)
    edit_token = forms.CharField(widget=forms.HiddenInput, max_length=64)

    request: HttpRequest | None = None
    definition: StoreDefinition | None = None

    class Meta:
        model = StoreInstance
        fields: list[str] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.outcome: Any = None
        self.text_digest = ""
        instance = self.instance
        if instance is not None and instance.pk is not None:
            # Only a state the editor may show: one past its limit is never formatted whole.
            if len(instance.state) <= MAX_EDIT_CHARS and state_decodes(instance):
                self.initial.setdefault("state_json", pretty_json(instance.value))
            self.initial.setdefault("expected_instance_id", instance.instance_id)
            self.initial.setdefault("expected_version", instance.version)
            self.initial.setdefault("edit_token", uuid.uuid4().hex)

    def clean_state_json(self) -> Any:
        text = self.cleaned_data["state_json"]
        try:
            value = json.loads(text, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as exc:
            raise forms.ValidationError(f"This is not valid JSON: {exc}") from None
        if value is None:
            raise forms.ValidationError("A store's state cannot be null.")
        self.text_digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        return value

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.errors or self.definition is None or self.request is None:
            return cleaned
        instance = self.instance
        new_state = cleaned["state_json"]
        # Only over the version the page was opened at, of a store that still exists: a
        # store deleted meanwhile is a conflict, not created again from ``initial`` (as
        # ``update_store_from`` would create it before comparing).
        condition = VersionCondition(
            ((cleaned["expected_instance_id"], cleaned["expected_version"]),),
            existing_only=True,
        )
        # The form's token and the text sent: the same form sent again with the same text
        # (a double click) is the same edit, replayed; with another text (the form brought
        # back by the browser's Back button) it is a new edit on a stale version.
        step_id = StoreStepId(
            admin_step_execution(self.request),
            f"admin-edit:{cleaned['edit_token']}:{self.text_digest[:32]}",
        )
        try:
            result = (
                get_store_client()
                .update_store_if(
                    self.definition,
                    instance.store_id,
                    updater=lambda draft: copy_json(new_state),
                    condition=condition,
                    step_id=step_id,
                )
                .result
            )
        except StoreValidationError as exc:
            for issue in exc.issues:
                where = format_path(issue["path"]) if issue["path"] else "the state"
                self.add_error("state_json", f"{where}: {issue['message']}")
            return cleaned
        except WorkflowValueError as exc:
            self.add_error("state_json", str(exc))
            return cleaned
        except YieldstarError as exc:
            self.add_error(None, str(exc))
            return cleaned
        if isinstance(result, StoreUpdateConflict):
            raise forms.ValidationError(conflict_message(result), code="conflict")
        self.outcome = result
        return cleaned


def state_decodes(obj: StoreInstance) -> bool:
    """Whether ``obj``'s state is valid JSON (remembered on ``obj`` for the text it holds:
    a page asks several times)."""
    memo = obj.__dict__.get("_yieldstar_state_decodes")
    if memo is None or memo[0] is not obj.state:
        memo = (obj.state, not isinstance(decoded(obj.state), Undecodable))
        obj.__dict__["_yieldstar_state_decodes"] = memo
    return bool(memo[1])


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def conflict_message(conflict: StoreUpdateConflict) -> str:
    """What the editor says when the store changed (or was deleted) while it was open."""
    if conflict.actual_instance_id == MISSING_INSTANCE:
        now = "it was deleted since"
    elif conflict.actual_instance_id != conflict.expected_instance_id:
        now = "it was deleted and created again since"
    else:
        now = f"it is now at version {conflict.actual_version}"
    return (
        f"Someone else changed this store while you were editing it: you opened version "
        f"{conflict.expected_version} and {now}. Your changes were NOT saved. Reload the page "
        f"to see the current state, then make your edit again (copy your text first)."
    )


@admin.register(StoreInstance)
class StoreInstanceAdmin(
    RefuseNulMixin,
    SearchLookupMixin,
    LargeTableListMixin,
    PageContextMixin,
    StoreHookMixin,
    admin.ModelAdmin,  # type: ignore[type-arg]
):
    """Store instances: the list, and a page per store with its state, history, waiters
    and ledger entries."""

    search_lookup = "store_id__startswith"

    list_display = ["name", "store_id", "short_instance", "version", "updated_at", "waiter_count"]
    list_display_links = ["store_id"]
    list_filter = [StoreNameFilter]
    search_fields = ["store_id"]
    search_help_text = "Stores whose id starts with the text (case-sensitive)."
    ordering = ["name", "store_id"]
    list_per_page = 100
    list_deferred = ("state",)  # the page reads it, not the list
    form = StoreStateForm
    change_form_template = "yieldstar_django/admin/store_change_form.html"
    info_fields = [
        "name",
        "store_id",
        "instance_id",
        "version",
        "created_at",
        "updated_at",
        "waiter_count",
    ]

    def get_queryset(self, request: HttpRequest) -> QuerySet[StoreInstance]:
        waiters = (
            Waiter.objects.filter(store=OuterRef("pk"))
            .order_by()
            .values("store")
            .annotate(n=Count("pk"))
            .values("n")
        )
        queryset: QuerySet[StoreInstance] = super().get_queryset(request)
        return queryset.annotate(
            waiter_count=Coalesce(Subquery(waiters, output_field=IntegerField()), 0)
        )

    # permissions: read-only by default; no adding or deleting through the ORM

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def may_change(self, request: HttpRequest, obj: Any = None) -> bool:
        """The change permission, narrowed by the definition's hook: whether the user may
        change ``obj``, whether or not its page can offer the editor."""
        allowed = super().has_change_permission(request, obj)
        if allowed and obj is not None:
            return self.store_hook_allows(request, obj, "change")
        return allowed

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """A store whose page offers no editor (:meth:`editor_refusal`) is shown as to a
        viewer: no Save button, and Django refuses a POST to it."""
        return self.may_change(request, obj) and (obj is None or self.editor_refusal(obj) is None)

    def editor_refusal(self, obj: StoreInstance) -> str | None:
        """Why the page of ``obj`` offers no editor even to a user who may change it, or
        ``None`` when it offers one."""
        if get_definition(obj.name) is None:
            return "its definition is not registered"
        if len(obj.state) > MAX_EDIT_CHARS:
            return "its state is larger than the editor's limit (1 MiB)"
        if not state_decodes(obj):
            return "its state is not valid JSON"
        return None

    def can_edit(self, request: HttpRequest, obj: StoreInstance | None) -> bool:
        """Whether this page offers the state editor."""
        return obj is not None and self.has_change_permission(request, obj)

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        if self.can_edit(request, obj):
            state: dict[str, Any] = {
                "fields": ["state_json", "expected_instance_id", "expected_version", "edit_token"]
            }
        else:
            state = {"fields": ["pretty_state"]}
            refusal = self.editor_refusal(obj) if obj is not None else None
            if refusal is not None and self.may_change(request, obj):
                state["description"] = f"Shown read-only: {refusal}."
        return [(None, {"fields": self.info_fields}), ("State", state)]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """A POST to the page of a store the user may change but whose page offers no
        editor (a form kept open while the store grew, or built by hand) is refused with a
        message, back on the page; nothing is written."""
        if request.method == "POST":
            obj = self.get_object(request, unquote(object_id))
            if obj is not None and self.may_change(request, obj):
                refusal = self.editor_refusal(obj)
                if refusal is not None:
                    self.message_user(
                        request,
                        f"This store cannot be edited in the admin: {refusal}. Nothing was saved.",
                        messages.ERROR,
                    )
                    return HttpResponseRedirect(request.get_full_path())
        return super().change_view(request, object_id, form_url, extra_context)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [*self.info_fields, "pretty_state"]

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        form = super().get_form(request, obj, change=change, **kwargs)
        definition = get_definition(obj.name) if obj is not None else None
        return type(form.__name__, (form,), {"request": request, "definition": definition})

    # display

    @admin.display(description="instance")
    def short_instance(self, obj: StoreInstance) -> str:
        return obj.instance_id[:8]

    @admin.display(description="waiters")
    def waiter_count(self, obj: StoreInstance) -> int:
        return int(getattr(obj, "waiter_count", 0))

    @admin.display(description="state")
    def pretty_state(self, obj: StoreInstance) -> SafeString:
        return pretty_block(decoded(obj.state))

    # saving: the form's clean() committed the change; never save the row

    def save_form(self, request: HttpRequest, form: Any, change: bool) -> Any:
        return form.instance

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        outcome = getattr(form, "outcome", None)
        if outcome is not None:
            obj.version = outcome.version

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        return None

    def construct_change_message(
        self, request: HttpRequest, form: Any, formsets: Any, add: bool = False
    ) -> list[dict[str, Any]]:
        outcome = getattr(form, "outcome", None)
        if outcome is None:
            return []
        return [
            {
                "changed": {
                    "fields": [f"state (version {outcome.previous_version} → {outcome.version})"]
                }
            }
        ]

    # the store page

    def page_context(self, request: HttpRequest, obj: StoreInstance) -> dict[str, Any]:
        return store_page_context(request, obj)


def store_page_context(request: HttpRequest, obj: StoreInstance) -> dict[str, Any]:
    """The history, waiters and ledger of one store, each bounded (a page, or a cap)."""
    versions = paginate(
        request,
        StoreVersion.objects.filter(
            store_name=obj.name, store_id=obj.store_id, instance_id=obj.instance_id
        )
        .annotate(state_size=Length("state"))
        .defer("state")
        .order_by("-version"),
        "versions",
        VERSIONS_PER_PAGE,
    )
    rows = list(versions.object_list)
    wanted = {v.version for v in rows} | {v.version - 1 for v in rows if v.version > 0}
    states = dict(
        StoreVersion.objects.filter(
            instance_id=obj.instance_id,
            version__in=wanted,
            state__isnull=False,
        )
        .annotate(state_size=Length("state"))
        .filter(state_size__lte=MAX_HISTORY_STATE_CHARS)
        .values_list("version", "state")
    )
    history = []
    for version in rows:
        state = states.get(version.version)
        previous = states.get(version.version - 1)
        if version.version == 0:
            change: SafeString | str = pretty_block(decoded(state)) if state else "created"
        elif state is not None and previous is not None:
            change = diff_block(decoded(previous), decoded(state))
        elif version.state_size is None:
            change = "state not kept"
        else:
            change = "too large to show"
        history.append(
            {
                "version": version.version,
                "created_at": version.created_at,
                "paths": format_paths(decoded(version.changed_paths, decode_paths)),
                "step": _step_label(version.step_execution_id, version.step_key),
                "execution_url": _execution_url(version.step_execution_id),
                "change": change,
            }
        )
    waiters = list(Waiter.objects.filter(store=obj).order_by("created_at", "pk")[:WAITERS_SHOWN])
    ledger = paginate(
        request,
        AppliedStep.objects.filter(store_name=obj.name, store_id=obj.store_id).order_by(
            "-created_at", "-pk"
        ),
        "ledger",
        LEDGER_PER_PAGE,
    )
    return {
        "store": obj,
        "history": history,
        "versions_page": versions,
        "versions_range": versions.paginator.get_elided_page_range(versions.number),
        "waiters": [
            {
                "waiter": waiter,
                "paths": format_paths(decoded(waiter.read_paths, decode_paths)),
                "execution_url": _execution_url(waiter.execution_id),
            }
            for waiter in waiters
        ],
        "waiters_more": max(0, int(getattr(obj, "waiter_count", 0)) - len(waiters)),
        "ledger": [
            {
                "entry": entry,
                "result": short_json(decoded(entry.result), limit=160),
                "execution_url": _execution_url(entry.execution_id),
            }
            for entry in ledger.object_list
        ],
        "ledger_page": ledger,
        "ledger_range": ledger.paginator.get_elided_page_range(ledger.number),
    }


def _step_label(execution_id: str | None, step_key: str | None) -> str:
    if not execution_id:
        return "—"
    return f"{execution_id} / {step_key}"


def _execution_url(execution_id: str | None) -> str | None:
    """The admin page of a workflow execution (not of an HTTP or admin principal)."""
    if not execution_id or is_principal(execution_id):
        return None
    return reverse("admin:yieldstar_execution_change", args=[quote(execution_id)])


__all__ = ["StoreInstanceAdmin", "StoreStateForm", "conflict_message"]
