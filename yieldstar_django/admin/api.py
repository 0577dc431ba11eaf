"""The HTTP API's idempotency keys, read-only."""

from __future__ import annotations

from django.contrib import admin

from ..models.api import IdempotencyKey
from .base import ReadOnlyAdminMixin, RefuseNulMixin, SearchLookupMixin

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


__all__ = ["IdempotencyKeyAdmin"]
