"""The execution admin: executions with status, error and their heap; resume, cancel and
retry (after a confirmation page, from the list or the execution's page), fork (from the
execution's page, after a page that picks the step); found by status (or in flight /
finished), workflow and recorded patch decision."""

from __future__ import annotations

from typing import Any, Final

from django.contrib import admin, messages
from django.contrib.admin import ShowFacets
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from ..api.permissions import any_execution_hook, execution_hook, execution_hook_allows
from ..core.keys import check_text
from ..models.runtime import (
    TERMINAL_STATUSES,
    Execution,
    ExecutionRun,
    ExecutionStatus,
    ExecutionStep,
)
from ..principals import is_reserved
from ..runtime.executions import cancel_execution, waited_stores
from ..runtime.queues import queue_position
from ..runtime.registry import registered_workflows
from ..runtime.repairs import (
    RETRYABLE_STATUSES,
    ExecutionStateError,
    ForkPointError,
    fork_execution,
    recorded_steps,
    retry_execution,
)
from ..runtime.steps import step_target
from ..wakes import wake_now
from .base import (
    CONFIRM_SHOWN,
    OperateActionsMixin,
    PageContextMixin,
    ReadOnlyAdminMixin,
    RefuseNulMixin,
    SearchLookupMixin,
    confirm_action,
)
from .display import Undecodable, decoded, pretty_block, short_json
from .pagination import paginate
from .patches import PatchDecisionFilter
from .schedules import ScheduleFilter
from .timeline import MAX_RUNS, build_timeline, duration, stamp

STEPS_PER_PAGE: Final = 50
#: How many ids a message of the bulk retry names per outcome (it counts the rest).
IDS_NAMED: Final = 20

STATUS_COLORS: Final = {
    "queued": "#6e7781",
    "pending": "#8a8a8a",
    "running": "#1f6feb",
    "waiting": "#bf8700",
    "sleeping": "#8250df",
    "retrying": "#d4a72c",
    "completed": "#1a7f37",
    "failed": "#cf222e",
    "cancelled": "#57606a",
}


class WorkflowNameFilter(admin.SimpleListFilter):
    """Filter by workflow, listing the registered workflows (no table scan)."""

    title = "workflow"
    parameter_name = "workflow"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(w.name, w.name) for w in registered_workflows()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(workflow_id=value) if value else queryset


class FinishedFilter(admin.SimpleListFilter):
    """In flight (``no``: not in a terminal status) or finished (``yes``: completed, failed
    or cancelled); another value filters nothing."""

    title = "finished"
    parameter_name = "finished"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("no", "in flight"), ("yes", "finished, failed or cancelled")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value == "no":
            return queryset.exclude(status__in=TERMINAL_STATUSES)
        if value == "yes":
            return queryset.filter(status__in=TERMINAL_STATUSES)
        return queryset


class ParentFilter(admin.SimpleListFilter):
    """The children of one execution (``?parent=<id>``, linked from its page), or the
    executions no other started (``?parent=-``)."""

    title = "parent"
    parameter_name = "parent"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        choices = [("-", "none (not a child)")]
        value = self.value()
        if value and value != "-":
            choices.append((value, f"children of {value}"))
        return choices

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        return queryset.filter(parent="" if value == "-" else value)


#: The fields of the (read-only) change page.
FIELDS: tuple[str, ...] = (
    "id",
    "workflow_id",
    "pretty_status",
    "pretty_waiting_on",
    "pretty_wake_at",
    "pretty_input",
    "pretty_result",
    "pretty_error",
    "runs",
    "retries",
    "pretty_forked_from",
    "queue",
    "queue_key",
    "priority",
    "queue_position",
    "pretty_parent",
    "deadline",
    "wake_pending",
    "lease_owner",
    "pretty_lease_expires_at",
    "pretty_created_at",
    "pretty_updated_at",
    "pretty_finished_at",
)


@admin.register(Execution)
class ExecutionAdmin(
    RefuseNulMixin,
    SearchLookupMixin,
    OperateActionsMixin,
    ReadOnlyAdminMixin,
    PageContextMixin,
    admin.ModelAdmin,  # type: ignore[type-arg]
):
    """Executions, newest first; a page per execution with its input, result or error and
    its heap steps (paginated). Actions: resume (request a run through the wake outbox),
    cancel (after a confirmation page), both with the change permission; retry (after a
    confirmation page) with ``retry_execution``, and from an execution's page fork (a
    page that picks the step) with ``fork_execution``; nothing else is editable. A
    workflow's permission hook narrows what the user sees and does, as in the HTTP API: a
    list shows the executions it allows ``"list"``, a page those it allows ``"view"``;
    cancel needs ``"cancel"``, resume (which only asks for a run) ``"view"`` and retry
    ``"retry"`` of every selected execution, or does nothing; fork needs ``"view"`` and
    ``"fork"`` of the execution."""

    list_display = ["id", "workflow_id", "pretty_status", "runs", "created_at", "finished_at"]
    list_filter = [
        "status",
        FinishedFilter,
        WorkflowNameFilter,
        ParentFilter,
        ScheduleFilter,
        PatchDecisionFilter,
    ]
    search_fields = ["id"]
    search_help_text = "Executions whose id starts with the text."
    ordering = ["-created_at"]
    list_per_page = 100
    list_deferred = ("input_json", "result_json", "error_json")  # the page reads them
    search_lookup = "id__startswith"
    actions = ["resume_executions", "cancel_executions", "retry_executions"]
    change_form_template = "yieldstar_django/admin/execution_change_form.html"
    readonly_fields = FIELDS
    fields = FIELDS

    operate_permission = "yieldstar.change_execution"  # resume and cancel
    retry_permission = "yieldstar.retry_execution"
    fork_permission = "yieldstar.fork_execution"

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm(self.retry_permission))

    def has_fork_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm(self.fork_permission))

    @admin.display(description="forked from")
    def pretty_forked_from(self, obj: Execution) -> SafeString | str:
        if not obj.forked_from:
            return "—"
        url = reverse("admin:yieldstar_execution_change", args=[quote(obj.forked_from)])
        return format_html(
            '<a href="{}">{}</a> (its first {} recorded step(s))',
            url,
            obj.forked_from,
            obj.fork_step,
        )

    @admin.display(description="position in its queue")
    def queue_position(self, obj: Execution) -> str:
        position = queue_position(obj.id) if obj.status == ExecutionStatus.QUEUED else None
        return "-" if position is None else str(position)

    @admin.display(description="parent")
    def pretty_parent(self, obj: Execution) -> SafeString | str:
        if not obj.parent:
            return "—"
        url = reverse("admin:yieldstar_execution_change", args=[quote(obj.parent)])
        return format_html('<a href="{}">{}</a>', url, obj.parent)

    @admin.display(description="status", ordering="status")
    def pretty_status(self, obj: Execution) -> SafeString:
        color = STATUS_COLORS.get(obj.status, "inherit")
        return format_html('<span style="color: {}">●</span> {}', color, obj.status)

    @admin.display(description="input")
    def pretty_input(self, obj: Execution) -> SafeString:
        return pretty_block(decoded(obj.input_json))

    @admin.display(description="result")
    def pretty_result(self, obj: Execution) -> SafeString | str:
        return pretty_block(decoded(obj.result_json)) if obj.result_json else "—"

    @admin.display(description="error")
    def pretty_error(self, obj: Execution) -> SafeString | str:
        return error_block(obj.error_json) if obj.error_json else "—"

    @admin.display(description="waiting on")
    def pretty_waiting_on(self, obj: Execution) -> SafeString | str:
        """The stores it waits on (its waiters), and the step that waits."""
        if not obj.waiting_on:
            return "—"
        stores = waited_stores(obj)
        if not stores:
            return format_html("step <code>{}</code>", obj.waiting_on)
        return format_html(
            "{} (step <code>{}</code>)",
            format_html_join(", ", "<code>{}/{}</code>", ((s["store"], s["id"]) for s in stores)),
            obj.waiting_on,
        )

    @admin.display(description="wake at")
    def pretty_wake_at(self, obj: Execution) -> str:
        return stamp(obj.wake_at)

    @admin.display(description="lease expires at")
    def pretty_lease_expires_at(self, obj: Execution) -> str:
        return stamp(obj.lease_expires_at)

    @admin.display(description="created at")
    def pretty_created_at(self, obj: Execution) -> str:
        return stamp(obj.created_at)

    @admin.display(description="updated at")
    def pretty_updated_at(self, obj: Execution) -> str:
        return stamp(obj.updated_at)

    @admin.display(description="finished at")
    def pretty_finished_at(self, obj: Execution) -> str:
        return stamp(obj.finished_at)

    @property
    def show_facets(self) -> ShowFacets:  # type: ignore[override]
        """No per-filter counts (``?_facets``) when a hook may hide executions: they
        would count those too."""
        return ShowFacets.NEVER if any_execution_hook() else ShowFacets.ALLOW

    def get_list_deferred(self, request: HttpRequest) -> tuple[str, ...]:
        """Nothing is deferred when a hook is asked about each row (it may read the
        input)."""
        return () if any_execution_hook() else self.list_deferred

    def may_hide_rows(self, request: HttpRequest) -> bool:
        """Whether a workflow's hook may hide rows of the list (it is asked about each)."""
        return any_execution_hook()

    def row_visible(self, request: HttpRequest, obj: Execution) -> bool:
        """Whether a list may show ``obj``: its workflow's hook allows ``"list"``."""
        return execution_hook_allows(request, "list", obj)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        allowed = bool(super().has_view_permission(request, obj))
        if allowed and obj is not None:
            return execution_hook_allows(request, "view", obj)
        return allowed

    def refused(self, request: HttpRequest, queryset: QuerySet[Execution], action: str) -> int:
        """How many executions of ``queryset`` their workflow's hook does not allow
        ``action`` (only those of workflows with a hook are read)."""
        hooked = [w.name for w in registered_workflows() if execution_hook(w.name) is not None]
        if not hooked:
            return 0
        return sum(
            1
            for execution in queryset.filter(workflow_id__in=hooked).iterator()
            if not execution_hook_allows(request, action, execution)
        )

    def refuse_action(
        self, request: HttpRequest, queryset: QuerySet[Execution], action: str
    ) -> bool:
        """Say so and answer ``True`` when the hook refuses ``action`` on a selected one."""
        count = self.refused(request, queryset, action)
        if count:
            self.message_user(
                request,
                f"You may not {action} {count} of the selected executions: nothing was done. "
                "Deselect them and try again.",
                messages.ERROR,
            )
        return bool(count)

    @admin.action(description="Resume selected executions", permissions=["operate"])
    def resume_executions(self, request: HttpRequest, queryset: QuerySet[Execution]) -> None:
        if self.refuse_action(request, queryset.exclude(status__in=TERMINAL_STATUSES), "view"):
            return
        count = 0
        for execution_id, workflow_id in (
            queryset.exclude(status__in=TERMINAL_STATUSES)
            .values_list("id", "workflow_id")
            .iterator()
        ):
            wake_now(execution_id, workflow_id, reason="admin")
            count += 1
        self.message_user(
            request,
            f"Requested a run of {count} execution(s); finished ones were skipped.",
            messages.SUCCESS,
        )

    @admin.action(description="Cancel selected executions", permissions=["operate"])
    def cancel_executions(
        self, request: HttpRequest, queryset: QuerySet[Execution]
    ) -> TemplateResponse | None:
        """Cancel the unfinished executions selected, after a confirmation page (as
        Django's delete action asks first: a cancel cannot be undone). The confirming
        post is the page's form: the same selection, ``select_across`` included, and
        ``post=yes``."""
        unfinished = queryset.exclude(status__in=TERMINAL_STATUSES)
        if self.refuse_action(request, unfinished, "cancel"):
            return None
        if request.POST.get("post") != "yes":
            shown = list(unfinished.only("id", "workflow_id", "status")[:CONFIRM_SHOWN])
            return confirm_action(
                self,
                request,
                "yieldstar_django/admin/execution_cancel_confirm.html",
                action="cancel_executions",
                shown=shown,
                count=len(shown) if len(shown) < CONFIRM_SHOWN else unfinished.count(),
                title="Cancel these executions?",
                action_label="Cancel",
                noun="unfinished execution",
                none_left="None of the selected executions is unfinished any more.",
                submit_label="Yes, cancel them",
            )
        ids = list(unfinished.values_list("id", flat=True))
        cancelled = sum(1 for execution_id in ids if cancel_execution(execution_id))
        self.message_user(
            request,
            f"Cancelled {cancelled} execution(s); finished ones were skipped.",
            messages.SUCCESS,
        )
        return None

    @admin.action(description="Retry selected executions", permissions=["retry"])
    def retry_executions(
        self, request: HttpRequest, queryset: QuerySet[Execution]
    ) -> TemplateResponse | None:
        """Retry the failed and cancelled executions selected, after a confirmation page;
        then say what became of each: retried, skipped (another status), retried by
        someone else meanwhile, or gone."""
        retryable = queryset.filter(status__in=RETRYABLE_STATUSES)
        if self.refuse_action(request, retryable, "retry"):
            return None
        if request.POST.get("post") != "yes":
            shown = list(retryable.only("id", "workflow_id", "status")[:CONFIRM_SHOWN])
            return confirm_action(
                self,
                request,
                "yieldstar_django/admin/execution_retry_confirm.html",
                action="retry_executions",
                shown=shown,
                count=len(shown) if len(shown) < CONFIRM_SHOWN else retryable.count(),
                title="Retry these executions?",
                action_label="Retry",
                noun="failed or cancelled execution",
                none_left="None of the selected executions is failed or cancelled any more.",
                submit_label="Yes, retry them",
            )
        outcomes: dict[str, list[str]] = {"retried": [], "skipped": [], "raced": [], "gone": []}
        for execution_id in queryset.values_list("id", flat=True).iterator():
            try:
                retried = retry_execution(execution_id)
            except Execution.DoesNotExist:
                outcomes["gone"].append(execution_id)
            except ExecutionStateError as exc:
                outcomes["skipped"].append(f"{execution_id} ({exc.status})")
            else:
                outcomes["retried" if retried else "raced"].append(execution_id)
        self.report_retries(request, outcomes)
        return None

    def report_retries(self, request: HttpRequest, outcomes: dict[str, list[str]]) -> None:
        """One message per outcome of a bulk retry, naming the first ``IDS_NAMED`` ids."""
        words = {
            "retried": ("Retried {n} execution(s)", messages.SUCCESS),
            "skipped": ("Skipped {n} execution(s) neither failed nor cancelled", messages.WARNING),
            "raced": ("{n} execution(s) were retried by someone else meanwhile", messages.WARNING),
            "gone": ("{n} execution(s) no longer exist", messages.WARNING),
        }
        if not any(outcomes.values()):
            self.message_user(request, "No execution was selected.", messages.WARNING)
        for outcome, ids in outcomes.items():
            if not ids:
                continue
            text, level = words[outcome]
            named = ", ".join(ids[:IDS_NAMED])
            more = f" and {len(ids) - IDS_NAMED} more" if len(ids) > IDS_NAMED else ""
            self.message_user(request, f"{text.format(n=len(ids))}: {named}{more}.", level)

    def get_urls(self) -> list[URLPattern]:
        opts = self.model._meta
        fork = path(
            "<path:object_id>/fork/",
            self.admin_site.admin_view(self.fork_view),
            name=f"{opts.app_label}_{opts.model_name}_fork",
        )
        return [fork, *super().get_urls()]

    def may_fork(self, request: HttpRequest, obj: Execution) -> bool:
        """The fork permission, and the workflow's hook allowing ``"view"`` and ``"fork"``."""
        return (
            self.has_fork_permission(request)
            and self.has_view_permission(request, obj)
            and execution_hook_allows(request, "fork", obj)
        )

    def may_retry(self, request: HttpRequest, obj: Execution) -> bool:
        """The retry permission, a failed or cancelled ``obj`` and the hook's ``"retry"``."""
        return (
            self.has_retry_permission(request)
            and obj.status in RETRYABLE_STATUSES
            and execution_hook_allows(request, "retry", obj)
        )

    def fork_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The fork page of an execution: its recorded steps numbered, a form for
        ``from_step`` (and an optional id); posting it forks and opens the new
        execution's page. An execution the user may not view is ``404``; one it may view
        but not fork is ``403``."""
        obj = self.get_object(request, unquote(object_id))
        if obj is None or not self.has_view_permission(request, obj):
            raise Http404("There is no such execution.")
        if not self.may_fork(request, obj):
            raise PermissionDenied
        steps = recorded_steps(obj.id)
        error = ""
        from_step = str(len(steps))
        new_id = ""
        if request.method == "POST":
            from_step = request.POST.get("from_step", "").strip()
            new_id = request.POST.get("execution_id", "").strip()
            error, forked = self.fork_posted(request, obj, from_step, new_id)
            if forked is not None:
                self.message_user(
                    request,
                    f"Forked {obj.id} at step {from_step} as {forked}.",
                    messages.SUCCESS,
                )
                return HttpResponseRedirect(
                    reverse("admin:yieldstar_execution_change", args=[quote(forked)])
                )
        opts = self.model._meta
        return TemplateResponse(
            request,
            "yieldstar_django/admin/execution_fork.html",
            {
                **self.admin_site.each_context(request),
                "opts": opts,
                "title": f"Fork execution {obj.id}",
                "execution": obj,
                "steps": [{"index": i, "step": step} for i, step in enumerate(steps, 1)],
                "recorded": len(steps),
                "from_step": from_step,
                "new_id": new_id,
                "error": error,
                "change_url": reverse("admin:yieldstar_execution_change", args=[quote(obj.id)]),
                "changelist_url": reverse("admin:yieldstar_execution_changelist"),
            },
        )

    def fork_posted(
        self, request: HttpRequest, obj: Execution, from_step: str, new_id: str
    ) -> tuple[str, str | None]:
        """Fork ``obj`` as the fork page's form asks: ``("", new id)``, or the error to
        show and ``None``."""
        if not from_step.isdecimal() or not from_step.isascii():
            return "The step must be a whole number from 0 up.", None
        if new_id:
            try:
                check_text("execution id", new_id)
            except (TypeError, ValueError) as exc:
                return f"The new id is not valid: {exc}.", None
            if is_reserved(new_id):
                return "Ids starting with 'http:' or 'admin:' are reserved.", None
        try:
            forked = fork_execution(obj.id, from_step=int(from_step), execution_id=new_id or None)
        except ForkPointError as exc:
            return str(exc), None
        except Execution.DoesNotExist:
            return "The execution no longer exists.", None
        except ValueError as exc:
            return f"Nothing was created: {exc}.", None
        return "", forked

    def page_context(self, request: HttpRequest, obj: Execution) -> dict[str, Any]:
        page = paginate(
            request,
            ExecutionStep.objects.filter(execution=obj).order_by("position", "pk"),
            "steps",
            STEPS_PER_PAGE,
        )
        steps = list(page.object_list)
        runs_total = obj.runs
        runs = list(
            ExecutionRun.objects.filter(execution_id=obj.id).order_by("-number", "-pk")[:MAX_RUNS]
        )[::-1]
        children = paginate(
            request,
            Execution.objects.filter(parent=obj.pk)
            .order_by("created_at", "pk")
            .only("id", "workflow_id", "status", "created_at", "finished_at"),
            "children",
            STEPS_PER_PAGE,
        )
        return {
            "execution": obj,
            "timeline": build_timeline(obj, runs, steps, waited_stores(obj), runs_total=runs_total),
            "children": [
                {
                    "id": child.id,
                    "url": reverse("admin:yieldstar_execution_change", args=[quote(child.id)]),
                    "workflow_id": child.workflow_id,
                    "status": child.status,
                    "color": STATUS_COLORS.get(child.status, "inherit"),
                    "created_at": child.created_at,
                    "finished_at": child.finished_at,
                }
                for child in children.object_list
            ],
            "children_page": children,
            "children_range": children.paginator.get_elided_page_range(children.number),
            "steps": [step_row(step) for step in steps],
            "steps_page": page,
            "steps_range": page.paginator.get_elided_page_range(page.number),
            "can_operate": self.has_operate_permission(request)
            and not obj.is_finished
            and execution_hook_allows(request, "cancel", obj),
            "can_retry": self.may_retry(request, obj),
            "fork_url": reverse("admin:yieldstar_execution_fork", args=[quote(obj.id)])
            if self.may_fork(request, obj)
            else "",
        }


def step_row(step: ExecutionStep) -> dict[str, Any]:
    """A heap row of the page: its value (compact JSON), or its error (with its traceback
    in full); a column that does not decode is shown as the value, raw and marked. Times
    to the millisecond, how long it took, and what it ran on."""
    error = decoded(step.error_json) if step.error_json else None
    times = {
        "started": stamp(step.created_at),
        "recorded": stamp(step.recorded_at),
        "wake_at": stamp(step.wake_at),
        "took": duration((step.recorded_at - step.created_at).total_seconds())
        if step.recorded_at is not None
        else "—",
        "target": step_target(step.kind, step.fingerprint),
    }
    if isinstance(error, Undecodable):
        return {"step": step, "value": short_json(error, limit=200), "error": None, **times}
    value = short_json(decoded(step.value_json), limit=200) if step.value_json else ""
    if error is not None and not isinstance(error, dict):
        error = {"type": "", "message": short_json(error, limit=200)}
    return {"step": step, "value": value, "error": error, **times}


def error_block(text: str) -> SafeString:
    """An execution's (or a step's) recorded error: its type and message, its traceback
    pre-formatted and wrapped, in full, then its other members as JSON; a column that does
    not decode is shown raw and marked."""
    error = decoded(text)
    if not isinstance(error, dict):
        return pretty_block(error)
    rest = {k: v for k, v in error.items() if k not in ("type", "message", "traceback")}
    traceback = error.get("traceback")
    return format_html(
        '<div class="yieldstar-error"><strong>{}</strong>: {}{}{}</div>',
        error.get("type", ""),
        error.get("message", ""),
        format_html('<pre class="yieldstar-traceback">{}</pre>', traceback)
        if isinstance(traceback, str) and traceback
        else "",
        pretty_block(rest) if rest else "",
    )


__all__ = ["ExecutionAdmin"]
