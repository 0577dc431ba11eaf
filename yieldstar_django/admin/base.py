"""Shared admin behaviour."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest


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


__all__ = ["ObjectOncePerRequestMixin"]
