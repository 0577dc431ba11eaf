"""The HTTP API's idempotency keys, read-only."""

from __future__ import annotations

from django.contrib import admin

from ..models.api import IdempotencyKey
from .base import ReadOnlyAdminMixin, RefuseNulMixin

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
class IdempotencyKeyAdmin(RefuseNulMixin, ReadOnlyAdminMixin, admin.ModelAdmin):  # type: ignore[type-arg]
    """Which request each ``Idempotency-Key`` was first used for."""

    list_display = ["key", "principal", "method", "target", "created_at"]
    search_fields = ["=key"]
    ordering = ["-created_at"]
    readonly_fields = FIELDS
    fields = FIELDS


__all__ = ["IdempotencyKeyAdmin"]
