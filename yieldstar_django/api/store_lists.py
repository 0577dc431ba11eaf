"""The store listing views: the definitions the user may see, and a store's ids, paged by
an opaque cursor in code-point order."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote

from django.core import signing
from django.db import connections
from django.db.models import Count, F, Q, QuerySet
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
from .permissions import StorePermission, StoreScope, check_hook, store_scope
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
        scopes = [store_scope(request, d) for d in registered_definitions()]
        scopes = [scope for scope in scopes if scope.visible]
        counts = dict(
            StoreInstance.objects.filter(
                name__in=[s.definition.name for s in scopes if not s.hooked]
            )
            .values_list("name")
            .annotate(n=Count("pk"))
            .order_by()
        )
        return Response(
            [
                {
                    "name": scope.definition.name,
                    "instances": instance_count(scope, counts),
                    "url": request.build_absolute_uri(quote(scope.definition.name, safe="") + "/"),
                }
                for scope in scopes
            ]
        )


def instance_count(scope: StoreScope, counts: dict[str, int]) -> int | None:
    """How many stores of the scope's definition the user may see: the count of all of
    them without a hook (from ``counts``), of the ``Q`` the hook answered with one (a query
    each), ``None`` when the hook answered only yes (counting would ask it of every id)."""
    if not scope.hooked:
        return counts.get(scope.definition.name, 0)
    id_filter = scope.filter()
    if id_filter is None:
        return None
    return StoreInstance.objects.filter(id_filter, name=scope.definition.name).count()


#: The most store rows one page of ids reads when a hook must be asked about each id: a
#: page may then hold fewer ids than ``limit`` (none, even) and still have a ``next``.
SCAN_LIMIT: Final = 2000
#: The salt of the signed cursor that resumes after an id the user may not see.
HIDDEN_CURSOR_SALT: Final = "yieldstar.api.store-ids"


@dataclass(frozen=True)
class Position:
    """Where a page of ids starts: after ``after`` (``None``: at the first id).
    ``shown`` is the last id the user was shown before it (``after`` itself, unless
    ``after`` is an id the user may not see)."""

    after: str | None = None
    shown: str | None = None


def encode_cursor(store_id: str) -> str:
    return base64.urlsafe_b64encode(store_id.encode("utf-8")).decode("ascii").rstrip("=")


def hidden_cursor(name: str, row_pk: int, shown: str | None) -> str:
    """A cursor after the row ``row_pk``, which the user may not see: signed, and naming
    the row by its primary key, never by its id."""
    return signing.dumps({"n": name, "r": row_pk, "a": shown}, salt=HIDDEN_CURSOR_SALT)


def decode_cursor(cursor: str, name: str | None = None) -> Position:
    """The position a cursor names (``400`` for one the list did not make). A signed
    cursor names a row the user may not see: the page starts after that row's id (or,
    if the row is gone, after the last id shown)."""
    if ":" in cursor and name is not None:
        return decode_hidden_cursor(cursor, name)
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        value = base64.b64decode(padded.encode("ascii"), altchars=b"-_", validate=True)
        text = value.decode("utf-8")
    except (ValueError, UnicodeError, binascii.Error):
        text = "\x00"
    if "\x00" in text or len(text) > MAX_KEY_LENGTH:
        raise ParseError(INVALID_CURSOR)
    return Position(text, text)


def decode_hidden_cursor(cursor: str, name: str) -> Position:
    try:
        payload = signing.loads(cursor, salt=HIDDEN_CURSOR_SALT)
    except signing.BadSignature:
        raise ParseError(INVALID_CURSOR) from None
    if not isinstance(payload, dict) or payload.get("n") != name:
        raise ParseError(INVALID_CURSOR)
    shown, row = payload.get("a"), payload.get("r")
    if not isinstance(row, int) or not (shown is None or isinstance(shown, str)):
        raise ParseError(INVALID_CURSOR)
    after = (
        StoreInstance.objects.filter(pk=row, name=name).values_list("store_id", flat=True).first()
    )
    return Position(after if after is not None else shown, shown)


def ordered_rows(name: str, position: Position, id_filter: Q | None) -> QuerySet[StoreInstance]:
    """The stores named ``name`` after the position (within ``id_filter``), in code-point
    order of their ids.

    PostgreSQL compares with the ``"C"`` collation (byte order of UTF-8, which is code-point
    order) whatever the database's collation; SQLite's default ``BINARY`` already does.
    """
    queryset = StoreInstance.objects.filter(name=name)
    if id_filter is not None:
        queryset = queryset.filter(id_filter)
    vendor = connections[queryset.db].vendor
    sort_key = Collate(F("store_id"), "C") if vendor == "postgresql" else F("store_id")
    queryset = queryset.alias(sort_key=sort_key)
    if position.after is not None:
        queryset = queryset.filter(sort_key__gt=position.after)
    return queryset.order_by("sort_key")


def store_ids_page(name: str, after: str | None, limit: int) -> list[str]:
    """Up to ``limit`` ids of stores named ``name`` after ``after``, in code-point order
    (every id: no hook is asked)."""
    rows = ordered_rows(name, Position(after, after), None)
    return list(rows.values_list("store_id", flat=True)[:limit])


def visible_ids_page(
    request: Request, scope: StoreScope, position: Position, limit: int
) -> tuple[list[str], str | None]:
    """A page of the ids the user may see after ``position`` and the cursor of the next
    page (``None``: the last page). Without a hook, one query; with one, the rows are read
    in batches (within the ``Q`` it answered, if any) and the hook is asked about each id,
    reading at most ``SCAN_LIMIT`` rows: a page that reaches it ends early, with a cursor
    after the last row read (signed, when the user may not see that row)."""
    name = scope.definition.name
    if not scope.hooked:
        ids = store_ids_page(name, position.after, limit + 1)
        if len(ids) > limit:
            return ids[:limit], encode_cursor(ids[limit - 1])
        return ids, None
    id_filter = scope.filter()
    shown: list[str] = []
    last_shown = position.shown
    last_pk: int | None = None  # the last row read, when the user may not see it
    scanned = 0
    while scanned < SCAN_LIMIT:
        batch = min(limit + 1, SCAN_LIMIT - scanned)
        rows = list(ordered_rows(name, position, id_filter).values_list("pk", "store_id")[:batch])
        for pk, store_id in rows:
            scanned += 1
            if scope.allows(request, store_id):
                shown.append(store_id)
                last_shown, last_pk = store_id, None
                if len(shown) > limit:
                    return shown[:limit], encode_cursor(shown[limit - 1])
            else:
                last_pk = pk
        if len(rows) < batch:
            return shown, None
        position = Position(rows[-1][1], last_shown)
    if last_pk is None:
        return shown, encode_cursor(shown[-1]) if shown else None
    return shown, hidden_cursor(name, last_pk, last_shown)


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
        scope = store_scope(request, definition)
        if not scope.visible:
            check_hook(request, definition, "view", None)  # its 403
        cursor = request.query_params.get("cursor")
        position = decode_cursor(cursor, definition.name) if cursor is not None else Position()
        limit = requested_page_size(request)
        ids, next_cursor = visible_ids_page(request, scope, position, limit)
        next_url = None
        if next_cursor is not None:
            next_url = replace_query_param(request.build_absolute_uri(), "cursor", next_cursor)
        return Response({"results": ids, "next": next_url})


# --- one store -----------------------------------------------------------------------------


__all__ = [
    "SCAN_LIMIT",
    "StoreDefinitionListView",
    "StoreIdListView",
    "store_ids_page",
    "visible_ids_page",
]
