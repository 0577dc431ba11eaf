"""The store listing views: the definitions the user may see, and a store's ids, paged by
an opaque cursor in code-point order."""

from __future__ import annotations

import base64
import binascii
from urllib.parse import quote

from django.db import connections
from django.db.models import Count, F
from django.db.models.functions import Collate
from rest_framework.exceptions import ParseError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

from ..core.constants import MAX_KEY_LENGTH
from ..core.definition import registered_definitions
from ..models.stores import StoreInstance
from .base import INVALID_CURSOR, YieldstarAPIView, definition_or_404, requested_page_size
from .openapi import (
    CURSOR,
    LIMIT,
    NAME,
    READ_ERRORS,
    errors,
    operation,
)
from .permissions import StorePermission, check_hook, hook_allows
from .serializers import (
    StoreDefinitionSerializer,
    StoreIdPageSerializer,
)


class StoreDefinitionListView(YieldstarAPIView):
    """``GET stores/``: the registered definitions with the number of stores of each."""

    permission_classes = [StorePermission]

    @operation(
        "stores_list",
        "List store definitions",
        "The registered store definitions the user may view, with the number of stores of each.",
        responses={200: StoreDefinitionSerializer(many=True), **errors(401, 403)},
        tags=["stores"],
    )
    def get(self, request: Request) -> Response:
        counts = dict(StoreInstance.objects.values_list("name").annotate(n=Count("pk")).order_by())
        results = [
            {
                "name": definition.name,
                "instances": counts.get(definition.name, 0),
                "url": request.build_absolute_uri(quote(definition.name, safe="") + "/"),
            }
            for definition in registered_definitions()
            if hook_allows(request, definition, "view", None)
        ]
        return Response(results)


def encode_cursor(store_id: str) -> str:
    return base64.urlsafe_b64encode(store_id.encode("utf-8")).decode("ascii").rstrip("=")


def decode_cursor(cursor: str) -> str:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        value = base64.b64decode(padded.encode("ascii"), altchars=b"-_", validate=True)
        text = value.decode("utf-8")
    except (ValueError, UnicodeError, binascii.Error):
        text = "\x00"
    if "\x00" in text or len(text) > MAX_KEY_LENGTH:
        raise ParseError(INVALID_CURSOR)
    return text


def store_ids_page(name: str, after: str | None, limit: int) -> list[str]:
    """Up to ``limit`` ids of stores named ``name`` after ``after``, in code-point order.

    PostgreSQL compares with the ``"C"`` collation (byte order of UTF-8, which is code-point
    order) whatever the database's collation; SQLite's default ``BINARY`` already does.
    """
    queryset = StoreInstance.objects.filter(name=name)
    vendor = connections[queryset.db].vendor
    sort_key = Collate(F("store_id"), "C") if vendor == "postgresql" else F("store_id")
    queryset = queryset.alias(sort_key=sort_key)
    if after is not None:
        queryset = queryset.filter(sort_key__gt=after)
    return list(queryset.order_by("sort_key").values_list("store_id", flat=True)[:limit])


class StoreIdListView(YieldstarAPIView):
    """``GET stores/<name>/``: store ids, cursor-paginated, in ascending code-point order."""

    permission_classes = [StorePermission]

    @operation(
        "store_ids_list",
        "List store ids",
        "Ids of the stores of one definition, in ascending code-point order, one page at a time.",
        parameters=[NAME, CURSOR, LIMIT],
        responses={200: StoreIdPageSerializer, **errors(*READ_ERRORS)},
        tags=["stores"],
    )
    def get(self, request: Request, name: str) -> Response:
        definition = definition_or_404(name)
        check_hook(request, definition, "view", None)
        cursor = request.query_params.get("cursor")
        after = decode_cursor(cursor) if cursor is not None else None
        limit = requested_page_size(request)
        ids = store_ids_page(definition.name, after, limit + 1)
        next_url = None
        if len(ids) > limit:
            ids = ids[:limit]
            next_url = replace_query_param(
                request.build_absolute_uri(), "cursor", encode_cursor(ids[-1])
            )
        return Response({"results": ids, "next": next_url})


# --- one store -----------------------------------------------------------------------------


__all__ = ["StoreDefinitionListView", "StoreIdListView", "store_ids_page"]
