"""The HTTP API's idempotency keys, read-only."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from ..models.api import IdempotencyKey
from .pagination import EstimatedCountPaginator

#: The fields of the (read-only) change page.
FIELDS: tuple[str, ...] = (
    "principal",
    "key",
    "method",
    "target",
    "fingerprint",
    "instance_id",
    "created_at",
)


@admin.register(IdempotencyKey)
class IdempotencyKeyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Which request each ``Idempotency-Key`` was first used for."""

    list_display = ["key", "principal", "method", "target", "created_at"]
    search_fields = ["=key"]
    ordering = ["-created_at"]
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    readonly_fields = FIELDS
    fields = FIELDS

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


__all__ = ["IdempotencyKeyAdmin"]
