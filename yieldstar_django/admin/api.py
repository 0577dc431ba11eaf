"""The HTTP API's idempotency keys, read-only; a key of a store write shows the store
(its ``target``), so the stores' permission hooks narrow the list as they narrow the
stores' own."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest

from ..core.definition import registered_definitions
from ..models.api import IdempotencyKey
from .base import ReadOnlyAdminMixin, RefuseNulMixin, SearchLookupMixin, hook_allows

#: The ``target`` of a store write's key begins so, then ``<name>/<id>``.
STORE_TARGET = "stores/"


def target_store(target: str) -> tuple[str, str] | None:
    """``(name, id)`` of a store write's ``target`` (``None``: not a store write)."""
    if not target.startswith(STORE_TARGET):
        return None
    name, slash, store_id = target[len(STORE_TARGET) :].partition("/")
    return (name, store_id) if slash else None


#: The fields of the (read-only) change page.
FIELDS: tuple[str, ...] = (
    "principal",
    "key",
    "method",
    "target",
    "fingerprint",
    "instance_id",
    "shared",
    "created_at",
)


@admin.register(IdempotencyKey)
class IdempotencyKeyAdmin(
    RefuseNulMixin,
    SearchLookupMixin,
    ReadOnlyAdminMixin,
    admin.ModelAdmin,  # type: ignore[type-arg]
):
    """Which request each ``Idempotency-Key`` was first used for. The search finds a key
    exactly, case included (a key is an opaque header value, bound byte for byte), through
    the index on ``key``."""

    list_display = ["key", "principal", "method", "target", "created_at"]
    search_fields = ["key"]  # shows the search box; SearchLookupMixin does the search
    search_help_text = "Keys equal to the text, case included (of every principal)."
    search_lookup = "key"
    ordering = ["-created_at"]
    readonly_fields = FIELDS
    fields = FIELDS

    def get_queryset(self, request: HttpRequest) -> QuerySet[IdempotencyKey]:
        """Without the keys of store writes to definitions whose hook hides them whole."""
        queryset: QuerySet[IdempotencyKey] = super().get_queryset(request)
        hidden = Q()
        for definition in registered_definitions():
            if not hook_allows(request, definition.name, "view", None):
                hidden |= Q(target__startswith=f"{STORE_TARGET}{definition.name}/")
        return queryset.exclude(hidden) if hidden else queryset

    def row_visible(self, request: HttpRequest, obj: IdempotencyKey) -> bool:
        """Whether a list may show ``obj``: the hook lets the user view the store its
        write targets (a key of a start shows no store)."""
        store = target_store(obj.target)
        return store is None or hook_allows(request, store[0], "view", store[1])

    def may_hide_rows(self, request: HttpRequest) -> bool:
        """Whether a definition the user may view has a hook: it is asked about each key
        of a store write to it (the database cannot apply its answer to ``target``)."""
        return any(
            d.permission is not None and hook_allows(request, d.name, "view", None)
            for d in registered_definitions()
        )

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        allowed = super().has_view_permission(request, obj)
        return allowed and (obj is None or self.row_visible(request, obj))


__all__ = ["IdempotencyKeyAdmin", "target_store"]
