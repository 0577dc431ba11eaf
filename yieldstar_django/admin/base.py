"""Shared admin behaviour."""

from __future__ import annotations

from typing import Any, Final

from django import forms
from django.contrib.admin import ShowFacets, helpers
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import SEARCH_VAR, ChangeList
from django.core.paginator import Paginator
from django.db import connections
from django.db.models import Q, QuerySet
from django.db.models.functions import Substr
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from ..api import permissions
from ..core.definition import get_definition, registered_definitions
from .pagination import EstimatedCountPaginator

#: How many of the selected rows an action's confirmation page lists (it counts the rest).
CONFIRM_SHOWN: Final = 200


def confirm_action(
    model_admin: Any,
    request: HttpRequest,
    template: str,
    *,
    action: str,
    shown: list[Any],
    count: int,
    **context: Any,
) -> TemplateResponse:
    """The confirmation page of list action ``action`` (``template`` extends
    ``action_confirm.html``): ``shown``, the first ``CONFIRM_SHOWN`` of the ``count`` rows it
    will act on, and a form posting the same selection back (the ticked ids, or
    ``select_across``) with ``post=yes``. ``context`` adds the page's words (``title``,
    ``action_label``, ``noun``, ``none_left``, ``submit_label``)."""
    opts = model_admin.model._meta
    return TemplateResponse(
        request,
        template,
        {
            **model_admin.admin_site.each_context(request),
            **context,
            "opts": opts,
            "changelist_url": reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist"),
            "action": action,
            "shown": shown,
            "count": count,
            "more": count - len(shown),
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
            "select_across": selects_across(request),
        },
    )


def selects_across(request: HttpRequest) -> bool:
    """Whether a list action was asked for "all N items" of the list (Django's
    ``select_across`` field, read as its action form reads it), not the ticked rows. A
    confirmation page carries it to the confirming post, whose form posts to the list URL
    it came from, so the list's filters select the same rows again."""
    return bool(forms.BooleanField(required=False).to_python(request.POST.get("select_across")))


class ObjectOncePerRequestMixin:
    """``get_object`` fetches a row once per request, though both our ``change_view`` and
    Django's form view ask for it."""

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> Any:
        cache: dict[tuple[Any, ...], Any] = request.__dict__.setdefault(
            "_yieldstar_admin_objects", {}
        )
        key = (type(self), object_id, from_field)
        if key not in cache:
            cache[key] = super().get_object(request, object_id, from_field)  # type: ignore[misc]
        return cache[key]


def holds_nul(request: HttpRequest) -> bool:
    """Whether the query string (but its search term, which Django's search form refuses
    itself), or the rows a list action selects, hold a NUL character."""
    if any(
        "\x00" in key or any("\x00" in value for value in values)
        for key, values in request.GET.lists()
        if key != SEARCH_VAR
    ):
        return True
    return any("\x00" in value for value in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME))


class RefuseNulMixin:
    """No stored key or value holds ``"\x00"`` and PostgreSQL refuses it in a query (a
    ``500``): a list asked for with one in its query string or its action's selection is
    refused as Django refuses lookups it cannot apply (a redirect to the list with ``?e=1``,
    nothing done), and an object id holding one names no row."""

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        if holds_nul(request):
            raise IncorrectLookupParameters("A NUL character names no row.")
        return super().get_changelist_instance(request)  # type: ignore[misc]

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> Any:
        if "\x00" in object_id:
            return None
        return super().get_object(request, object_id, from_field)  # type: ignore[misc]


class PageContextMixin(ObjectOncePerRequestMixin):
    """A change page with more than the form: ``page_context(request, obj)`` is added to
    the template context when the user may view ``obj``."""

    def page_context(self, request: HttpRequest, obj: Any) -> dict[str, Any]:
        raise NotImplementedError

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        context = dict(extra_context or {})
        obj = self.get_object(request, unquote(object_id))  # as Django's own view does
        if obj is not None and self.has_view_permission(request, obj):  # type: ignore[attr-defined]
            context.update(self.page_context(request, obj))
        return super().change_view(  # type: ignore[misc, no-any-return]
            request, object_id, form_url, extra_context=context
        )


class SearchLookupMixin:
    """Search one indexed column with ``search_lookup`` (e.g. ``"store_id__startswith"``)
    instead of the admin's OR of ``icontains`` over ``search_fields``; a term holding
    ``"\x00"`` (which no stored key holds) finds nothing. A ``__startswith`` search is
    case-sensitive on SQLite too, whose ``LIKE`` ignores the case of ASCII letters: there
    the column's first characters are compared with the term as well."""

    search_lookup: str

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        if "\x00" in term:
            return queryset.none(), False
        queryset = queryset.filter(**{self.search_lookup: term})
        column, _, lookup = self.search_lookup.rpartition("__")
        if lookup == "startswith" and connections[queryset.db].vendor == "sqlite":
            prefix = Substr(column, 1, len(term))
            queryset = queryset.alias(searched_prefix=prefix).filter(searched_prefix=term)
        return queryset, False


#: How many rows of a list a permission hook is asked about to leave the ones it hides out
#: of the list's count, its pages and its actions (``DeferringChangeList``).
HOOK_SCAN_ROWS: Final = 10_000


def shown_rows(model_admin: Any, request: HttpRequest, rows: list[Any]) -> list[Any] | None:
    """The rows of ``rows`` the model admin's ``visible_rows(request, rows)`` returns or,
    without it, its ``row_visible(request, obj)`` allows (``None``: it has neither)."""
    many = getattr(model_admin, "visible_rows", None)
    if many is not None:
        return list(many(request, rows))
    one = getattr(model_admin, "row_visible", None)
    if one is not None:
        return [obj for obj in rows if one(request, obj)]
    return None


class DeferringChangeList(ChangeList):
    """A list that does not fetch its model admin's ``list_deferred`` columns
    (``get_list_deferred``), and leaves out the rows a permission hook hides: when the
    model admin's ``may_hide_rows(request)`` says a hook may hide some, the first
    ``HOOK_SCAN_ROWS`` rows the list selects are asked about (``shown_rows``) and the
    hidden ones excluded, so the count, the pages and "select all" know only the rows the
    user may see; each row of a page is asked about again, beyond that bound too."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Any]:
        queryset: QuerySet[Any] = super().get_queryset(request, exclude_parameters)
        deferred: tuple[str, ...] = self.model_admin.get_list_deferred(request)  # type: ignore[attr-defined]
        if deferred:
            queryset = queryset.defer(*deferred)
        hides = getattr(self.model_admin, "may_hide_rows", None)
        if hides is None or not hides(request):
            return queryset
        scanned = list(queryset[:HOOK_SCAN_ROWS])
        shown = shown_rows(self.model_admin, request, scanned)
        if shown is None:
            return queryset
        kept = {obj.pk for obj in shown}
        hidden = [obj.pk for obj in scanned if obj.pk not in kept]
        return queryset.exclude(pk__in=hidden) if hidden else queryset

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        # A list action's post (its own queryset) renders no rows: none is fetched.
        if request.method not in ("GET", "HEAD"):
            return
        shown = shown_rows(self.model_admin, request, list(self.result_list))
        if shown is not None and len(shown) < len(self.result_list):
            self.result_list = shown  # else the page's own queryset stays


class LargeTableListMixin:
    """Lists use the estimated-count paginator, so they stay fast on large tables, and
    fetch none of the ``list_deferred`` columns (large ones no list column shows: a
    state, an execution's input), which the change page still reads."""

    paginator: type[Paginator[Any]] = EstimatedCountPaginator
    show_full_result_count = False
    #: Columns the list (and its actions' querysets) does not fetch.
    list_deferred: tuple[str, ...] = ()

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return DeferringChangeList

    def get_list_deferred(self, request: HttpRequest) -> tuple[str, ...]:
        """The columns the list does not fetch (``list_deferred``)."""
        return self.list_deferred


class OperateActionsMixin:
    """Actions declared with ``permissions=["operate"]`` need the user to hold
    ``operate_permission`` (``"app_label.codename"``). The read-only admins deny Django's
    ``change`` permission on their own rows, so their actions cannot ask for that."""

    operate_permission: str

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm(self.operate_permission))


def hook_allows(request: HttpRequest, name: str, action: str, store_id: str | None) -> bool:
    """The permission hook of the definition named ``name``, as the API applies it
    (``action`` is ``"view"`` or ``"change"``, ``store_id`` ``None`` for the definition as
    a whole; no definition, or no hook: allowed)."""
    definition = get_definition(name)
    return definition is None or permissions.hook_allows(request, definition, action, store_id)


def hidden_store_names(request: HttpRequest) -> list[str]:
    """The registered store names whose hook does not let the user view them as a whole."""
    return [
        d.name for d in registered_definitions() if not hook_allows(request, d.name, "view", None)
    ]


def per_store_hooks(request: HttpRequest) -> bool:
    """Whether the hook of some registered definition lets the user view it as a whole
    and answers each store on its own (a plain yes: no ``Q`` the database can apply)."""
    for definition in registered_definitions():
        scope = permissions.store_scope(request, definition)
        if scope.visible and not scope.countable:
            return True
    return False


def store_rows_filter(request: HttpRequest, name_field: str, id_field: str) -> Q | None:
    """What excludes the rows of stores the user may not view, as far as the database can
    tell: the rows of a definition its hook hides, and those outside the ``Q`` a hook
    answered for its definition (``None``: nothing to exclude). A hook that answered only
    yes is asked about each row shown (``StoreHookMixin.row_visible``)."""
    excluded: list[Q] = []
    for definition in registered_definitions():
        scope = permissions.store_scope(request, definition)
        if not scope.visible:
            excluded.append(Q(**{name_field: definition.name}))
            continue
        id_filter = scope.filter(id_field)
        if id_filter is not None:
            excluded.append(Q(**{name_field: definition.name}) & ~id_filter)
    if not excluded:
        return None
    combined = excluded[0]
    for q in excluded[1:]:
        combined |= q
    return combined


class StoreHookMixin:
    """Rows of named stores (the name in ``store_name_field``, the id in ``store_id``),
    narrowed by their definition's ``permission`` hook as in the HTTP API: rows the
    database can tell the hook hides (a definition it hides, ids outside the ``Q`` it
    answered) are not listed, searched nor found by id, each row of a page is asked about
    (``row_visible``), and the page of a row whose store the hook does not let the user
    view is refused."""

    store_name_field: str = "name"
    #: No per-filter counts (``?_facets``): they would count rows a hook hides.
    show_facets = ShowFacets.NEVER

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset: QuerySet[Any] = super().get_queryset(request)  # type: ignore[misc]
        excluded = store_rows_filter(request, self.store_name_field, "store_id")
        return queryset if excluded is None else queryset.exclude(excluded)

    def store_hook_allows(self, request: HttpRequest, obj: Any, action: str) -> bool:
        """Whether the hook of ``obj``'s store allows ``action`` on that store."""
        return hook_allows(request, getattr(obj, self.store_name_field), action, obj.store_id)

    def row_visible(self, request: HttpRequest, obj: Any) -> bool:
        """Whether a list may show ``obj``: the hook lets the user view its store."""
        return self.store_hook_allows(request, obj, "view")

    def may_hide_rows(self, request: HttpRequest) -> bool:
        """Whether a hook is asked about each store (one that answered the definition as
        a whole with a plain yes): the list's rows are then asked about too."""
        return per_store_hooks(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        allowed = bool(super().has_view_permission(request, obj))  # type: ignore[misc]
        if allowed and obj is not None:
            return self.store_hook_allows(request, obj, "view")
        return allowed


class ReadOnlyAdminMixin(LargeTableListMixin):
    """Rows the protocol writes: listed and shown, never added, changed or deleted here."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


__all__ = [
    "CONFIRM_SHOWN",
    "HOOK_SCAN_ROWS",
    "DeferringChangeList",
    "LargeTableListMixin",
    "ObjectOncePerRequestMixin",
    "OperateActionsMixin",
    "ReadOnlyAdminMixin",
    "RefuseNulMixin",
    "SearchLookupMixin",
    "StoreHookMixin",
    "confirm_action",
    "hidden_store_names",
    "holds_nul",
    "hook_allows",
    "per_store_hooks",
    "selects_across",
    "shown_rows",
    "store_rows_filter",
]
