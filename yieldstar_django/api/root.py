"""``GET /`` of the API (its store definitions and links) and the JSON ``404`` that answers
every URL under the API's prefix that no endpoint matches."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from django.urls import reverse
from rest_framework.exceptions import NotFound
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from ..core.definition import registered_definitions
from .base import YieldstarAPIView
from .openapi import errors, extend_schema, operation
from .permissions import SchemaPermission, hook_allows, store_permission
from .serializers import ApiRootSerializer


def _url(request: Request, name: str) -> str:
    namespace = request.resolver_match.namespace if request.resolver_match else ""
    return request.build_absolute_uri(reverse(f"{namespace}:{name}" if namespace else name))


class ApiRootView(YieldstarAPIView):
    """``GET /``: open to authenticated users with any ``yieldstar`` permission; lists the
    store definitions they may view (none without ``view_storeinstance``)."""

    permission_classes = [SchemaPermission]

    @operation(
        "api_root",
        "API root",
        "The store definitions the user may view, and links to the stores, "
        "the executions, the schedules and this schema.",
        responses={200: ApiRootSerializer, **errors(401, 403)},
        tags=["root"],
    )
    def get(self, request: Request) -> Response:
        stores_url = _url(request, "store-list")
        may_view = request.user.has_perm(store_permission("view"))
        stores = [
            {"name": d.name, "url": stores_url + quote(d.name, safe="") + "/"}
            for d in registered_definitions()
            if may_view and hook_allows(request, d, "view", None)
        ]
        links = {
            "stores": stores_url,
            "executions": _url(request, "execution-list"),
            "schedules": _url(request, "schedule-list"),
            "schema": _url(request, "schema"),
        }
        return Response({"stores": stores, "links": links})


class NotFoundView(YieldstarAPIView):
    """Any other URL under the API's prefix, any method (``OPTIONS`` too, which DRF would
    answer anyone with this view's metadata): a JSON ``404`` (not the project's HTML page).
    Not in the schema."""

    permission_classes = [AllowAny]
    body_methods = write_methods = frozenset()

    @extend_schema(exclude=True)
    def not_found(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        raise NotFound("There is no such endpoint in this API.", code="unknown_endpoint")

    get = post = put = patch = delete = options = not_found


__all__ = ["ApiRootView", "NotFoundView"]
