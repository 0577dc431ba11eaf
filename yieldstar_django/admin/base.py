"""Shared admin behaviour."""

from __future__ import annotations

from typing import Any

from django.contrib.admin import helpers
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import SEARCH_VAR
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from .pagination import EstimatedCountPaginator


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
        obj = self.get_object(request, object_id)
        if obj is not None and self.has_view_permission(request, obj):  # type: ignore[attr-defined]
            context.update(self.page_context(request, obj))
        return super().change_view(  # type: ignore[misc, no-any-return]
            request, object_id, form_url, extra_context=context
        )


class SearchLookupMixin:
    """Search one indexed column with ``search_lookup`` (e.g. ``"store_id__startswith"``)
    instead of the admin's OR of ``icontains`` over ``search_fields``; a term holding
    ``"\x00"`` (which no stored key holds) finds nothing."""

    search_lookup: str

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        if "\x00" in term:
            return queryset.none(), False
        return queryset.filter(**{self.search_lookup: term}), False


class LargeTableListMixin:
    """Lists use the estimated-count paginator, so they stay fast on large tables."""

    paginator: type[Paginator[Any]] = EstimatedCountPaginator
    show_full_result_count = False


class OperateActionsMixin:
    """Actions declared with ``permissions=["operate"]`` need the user to hold
    ``operate_permission`` (``"app_label.codename"``). The read-only admins deny Django's
    ``change`` permission on their own rows, so their actions cannot ask for that."""

    operate_permission: str

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm(self.operate_permission))


class ReadOnlyAdminMixin(LargeTableListMixin):
    """Rows the protocol writes: listed and shown, never added, changed or deleted here."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


__all__ = [
    "LargeTableListMixin",
    "ObjectOncePerRequestMixin",
    "OperateActionsMixin",
    "ReadOnlyAdminMixin",
    "RefuseNulMixin",
    "SearchLookupMixin",
    "holds_nul",
]
