"""DRF views of the HTTP API (see ``docs/internals/architecture.md#api``).

Every view refuses anonymous requests and checks model permissions itself (see
:mod:`~yieldstar_django.api.permissions`), renders every error as JSON through
:func:`~yieldstar_django.api.exceptions.exception_handler`, and runs outside
``ATOMIC_REQUESTS``: a store write commits (and wakes) on its own, and user code never runs
inside a request-wide transaction.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any, ClassVar
from urllib.parse import quote

from django.db import connections, transaction
from django.db.models import Count, F
from django.db.models.functions import Collate
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse
from rest_framework import status
from rest_framework.exceptions import APIException, NotFound, ParseError
from rest_framework.parsers import BaseParser
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param
from rest_framework.views import APIView

from ..conf import yieldstar_settings
from ..core.cas import CasStoreClient
from ..core.commits import VersionCondition
from ..core.constants import MAX_KEY_LENGTH
from ..core.definition import StoreDefinition, get_definition, registered_definitions
from ..core.durable import decode_durable
from ..core.errors import StoreContentionError, StoreValidationError, WorkflowValueError
from ..core.results import StoreSnapshot, StoreUpdateResult
from ..models.stores import StoreInstance
from . import idempotency
from .conditions import Condition, make_etag, parse_etag, parse_if_match
from .exceptions import (
    BodyRequired,
    NullState,
    PreconditionFailed,
    PreconditionRequired,
    RequestTooLarge,
    exception_handler,
)
from .json_patch import PatchError, apply_patch, parse_patch
from .jsonvalue import copy_json
from .merge_patch import apply_merge_patch
from .openapi import (
    CURSOR,
    ETAG_HEADER,
    IDEMPOTENCY_KEY,
    IF_MATCH,
    IF_NONE_MATCH,
    LIMIT,
    NAME,
    READ_ERRORS,
    STORE_ID,
    WRITE_ERRORS,
    WRITE_ETAG_HEADER,
    errors,
    extend_schema,
)
from .parsers import JSON_PATCH, MERGE_PATCH, JsonPatchParser, MergePatchParser, SafeJSONParser
from .permissions import StorePermission, check_hook, hook_allows, store_action
from .serializers import (
    JsonPatchOperationSerializer,
    StoreDefinitionSerializer,
    StoreIdPageSerializer,
    StoreSnapshotSerializer,
    StoreWriteResultSerializer,
)

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000

Updater = Callable[[Any], Any]


def store_client() -> CasStoreClient:
    """The store client of the default database (imported late: it needs the app registry)."""
    from ..connector import get_store_client

    return get_store_client()


class YieldstarAPIView(APIView):
    """Base view: JSON only, JSON errors, body size guard, no request-wide transaction."""

    renderer_classes = [JSONRenderer]
    parser_classes = [SafeJSONParser]
    #: drf-spectacular's schema class on the views themselves: the project need not set
    #: ``REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"]`` (which would change its other views too).
    schema = AutoSchema()
    body_methods: ClassVar[frozenset[str]] = frozenset({"POST", "PUT", "PATCH"})

    @classmethod
    def as_view(cls, **initkwargs: Any) -> Any:
        return transaction.non_atomic_requests(super().as_view(**initkwargs))

    def get_exception_handler(self) -> Callable[[Exception, dict[str, Any]], Response | None]:
        return exception_handler

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        if request.method in self.body_methods:
            limit = yieldstar_settings.API_MAX_BODY_BYTES
            if content_length(request) > limit:
                raise RequestTooLarge(f"The request body is larger than {limit} bytes.")

    def body(self, request: Request) -> Any:
        """The parsed body; ``400`` when there is none."""
        if content_length(request) <= 0:
            raise BodyRequired()
        return request.data


def content_length(request: Request) -> int:
    """The declared ``Content-Length`` (``0`` when absent or malformed)."""
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0


def body_media_type(request: Request) -> str:
    """The body's media type without parameters, lower-cased (``""`` when absent)."""
    return (request.content_type or "").split(";")[0].strip().lower()


def definition_or_404(name: str) -> StoreDefinition:
    definition = get_definition(name)
    if definition is None:
        raise NotFound(f"There is no store definition named {name!r}.", code="unknown_store")
    return definition


def check_store_id(store_id: str) -> None:
    """``404`` for an id no store can have (too long, or holding characters PostgreSQL
    cannot store)."""
    if len(store_id) > MAX_KEY_LENGTH or "\x00" in store_id:
        raise NotFound("No store can have this id.", code="invalid_store_id")
    try:
        store_id.encode("utf-8")
    except UnicodeEncodeError:
        raise NotFound("No store can have this id.", code="invalid_store_id") from None


# --- definitions and ids ------------------------------------------------------------------


class StoreDefinitionListView(YieldstarAPIView):
    """``GET stores/``: the registered definitions with the number of stores of each."""

    permission_classes = [StorePermission]

    @extend_schema(
        operation_id="stores_list",
        summary="List store definitions",
        description="The registered store definitions the user may view, with the number "
        "of stores of each.",
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
        raise ParseError("The cursor is invalid; use the `next` link of a page.")
    return text


def page_size(request: Request) -> int:
    raw = request.query_params.get("limit")
    if raw is None:
        return DEFAULT_PAGE_SIZE
    if not raw.isdigit() or not raw.isascii() or not 1 <= int(raw[:6]) <= MAX_PAGE_SIZE:
        raise ParseError(f"limit must be an integer from 1 to {MAX_PAGE_SIZE}.")
    return int(raw)


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

    @extend_schema(
        operation_id="store_ids_list",
        summary="List store ids",
        description="Ids of the stores of one definition, in ascending code-point order, "
        "one page at a time.",
        parameters=[NAME, CURSOR, LIMIT],
        responses={200: StoreIdPageSerializer, **errors(*READ_ERRORS)},
        tags=["stores"],
    )
    def get(self, request: Request, name: str) -> Response:
        definition = definition_or_404(name)
        check_hook(request, definition, "view", None)
        cursor = request.query_params.get("cursor")
        after = decode_cursor(cursor) if cursor is not None else None
        limit = page_size(request)
        ids = store_ids_page(definition.name, after, limit + 1)
        next_url = None
        if len(ids) > limit:
            ids = ids[:limit]
            next_url = replace_query_param(
                request.build_absolute_uri(), "cursor", encode_cursor(ids[-1])
            )
        return Response({"results": ids, "next": next_url})


# --- one store -----------------------------------------------------------------------------


def not_null(updater: Updater) -> Updater:
    """Refuse a write that would make the state ``null`` (an updater returning ``None``
    means "keep the draft", so a store cannot be set to ``null``)."""

    def guarded(draft: Any) -> Any:
        result = updater(draft)
        if result is None and draft is not None:
            raise NullState()
        return result

    return guarded


def snapshot_body(
    definition: StoreDefinition, store_id: str, snapshot: StoreSnapshot
) -> dict[str, Any]:
    return {
        "name": definition.name,
        "id": store_id,
        "instance_id": snapshot.instance_id,
        "version": snapshot.version,
        "state": snapshot.state,
    }


def version_condition(condition: Condition | None) -> VersionCondition | None:
    """The core's condition for an ``If-Match``: ``*`` accepts any version; a list of
    ETags the (instance_id, version) pairs they name (a tag that names none matches
    nothing, as it matches no ETag this API gives)."""
    if condition is None:
        return None
    if condition.any:
        return VersionCondition(any_version=True)
    return VersionCondition(tuple(v for v in map(parse_etag, condition.tags) if v is not None))


class StoreDetailView(YieldstarAPIView):
    """``stores/<name>/<id>/``: read, replace, patch or delete one store.

    Writes are compare-and-swaps: with ``If-Match`` on the named version (``412`` with the
    current ETag when it moved), without on the version just read (retried after a lost
    race, so a patch always applies to the state it commits over). ``Idempotency-Key``
    makes a write exactly once (see :mod:`~yieldstar_django.api.idempotency`).
    """

    permission_classes = [StorePermission]

    def get_parsers(self) -> list[BaseParser]:
        method = getattr(getattr(self, "request", None), "method", None)
        if method == "PATCH":
            return [MergePatchParser(), JsonPatchParser()]
        return [SafeJSONParser()]

    def setup_store(self, request: Request, name: str, id: str) -> StoreDefinition:
        definition = definition_or_404(name)
        check_store_id(id)
        check_hook(request, definition, store_action(request), id)
        return definition

    # GET

    @extend_schema(
        operation_id="store_retrieve",
        summary="Read a store",
        description="The store's snapshot; its `ETag` names (instance_id, version). A read "
        "never writes: a store that does not exist yet is `404` (`store_not_found`); the "
        "first write creates it from the definition's initial state.",
        parameters=[NAME, STORE_ID, IF_NONE_MATCH, ETAG_HEADER],
        responses={
            200: StoreSnapshotSerializer,
            304: OpenApiResponse(description="Not modified since the `If-None-Match` ETag."),
            **errors(*READ_ERRORS),
        },
        tags=["stores"],
    )
    def get(self, request: Request, name: str, id: str) -> Response:
        definition = self.setup_store(request, name, id)
        none_match = parse_if_match(request.headers.get("If-None-Match"), "If-None-Match")
        stored = store_client().read_store(definition, id)
        if stored is None:
            raise NotFound(
                f"There is no store {id!r} of {definition.name!r} yet; a write creates it "
                "from the definition's initial state.",
                code="store_not_found",
            )
        snapshot = StoreSnapshot(decode_durable(stored.encoded), stored.instance_id, stored.version)
        etag = make_etag(snapshot.instance_id, snapshot.version)
        if none_match is not None:
            condition = none_match
            if condition is not None and condition.matches(etag):
                return Response(status=status.HTTP_304_NOT_MODIFIED, headers={"ETag": etag})
        return Response(snapshot_body(definition, id, snapshot), headers={"ETag": etag})

    # PUT / PATCH / DELETE

    @extend_schema(
        operation_id="store_replace",
        summary="Replace a store's state",
        description="Validates the body with the definition's schema and commits it as the "
        "next version (compare-and-swap).",
        request={"application/json": OpenApiTypes.ANY},
        parameters=[NAME, STORE_ID, IF_MATCH, IDEMPOTENCY_KEY, WRITE_ETAG_HEADER],
        responses={200: StoreWriteResultSerializer, **errors(*WRITE_ERRORS)},
        tags=["stores"],
    )
    def put(self, request: Request, name: str, id: str) -> Response:
        definition = self.setup_store(request, name, id)
        condition = self.condition(request)
        body = self.body(request)

        def replace(draft: Any) -> Any:
            return copy_json(body)

        return self.update(request, definition, id, condition, not_null(replace), body)

    @extend_schema(
        operation_id="store_patch",
        summary="Patch a store's state",
        description="`application/merge-patch+json` (RFC 7396) or "
        "`application/json-patch+json` (RFC 6902, `test` included). The patch is applied "
        "to the state it commits over: after a lost race it is applied again to the newer "
        "state, unless `If-Match` pins the version.",
        request={
            MERGE_PATCH: OpenApiTypes.ANY,
            JSON_PATCH: JsonPatchOperationSerializer(many=True),
        },
        parameters=[NAME, STORE_ID, IF_MATCH, IDEMPOTENCY_KEY, WRITE_ETAG_HEADER],
        responses={200: StoreWriteResultSerializer, **errors(*WRITE_ERRORS)},
        tags=["stores"],
    )
    def patch(self, request: Request, name: str, id: str) -> Response:
        definition = self.setup_store(request, name, id)
        condition = self.condition(request)
        body = self.body(request)
        media_type = body_media_type(request)
        if media_type == JSON_PATCH:
            operations = parse_patch(body)

            def updater(draft: Any) -> Any:
                return apply_patch(draft, operations, in_place=True)

        else:
            assert media_type == MERGE_PATCH

            def updater(draft: Any) -> Any:
                return apply_merge_patch(draft, body, in_place=True)

        return self.update(request, definition, id, condition, not_null(updater), body)

    @extend_schema(
        operation_id="store_delete",
        summary="Delete a store",
        description="Removes the store and its waiters (waking them). Without `If-Match` "
        "or `Idempotency-Key` a missing store is left missing; with either, the delete is "
        "a compare-and-swap on a snapshot (a missing store is created first, as "
        "`delete_store_from` does).",
        request=None,
        parameters=[NAME, STORE_ID, IF_MATCH, IDEMPOTENCY_KEY],
        responses={
            204: OpenApiResponse(description="Deleted (or replayed)."),
            **errors(400, 401, 403, 404, 409, 412, 422, 428),
        },
        tags=["stores"],
    )
    def delete(self, request: Request, name: str, id: str) -> Response:
        definition = self.setup_store(request, name, id)
        condition = self.condition(request)
        claim = self.claim(request, definition, id, condition, None)
        client = store_client()
        if claim is None and (condition is None or condition.any):
            client.delete_store(definition, id)
            return Response(status=status.HTTP_204_NO_CONTENT)
        try:
            result = client.delete_store_if(
                definition,
                id,
                condition=version_condition(condition) or VersionCondition(any_version=True),
                step_id=claim.step_id if claim else None,
            )
            if not result.deleted:
                raise PreconditionFailed(
                    make_etag(result.actual_instance_id, result.actual_version)
                )
        except BaseException as exc:
            if claim is not None and self.not_committed(exc):
                claim.release()
            raise
        return Response(status=status.HTTP_204_NO_CONTENT)

    # helpers

    def condition(self, request: Request) -> Condition | None:
        condition = parse_if_match(request.headers.get("If-Match"))
        if condition is None and yieldstar_settings.API_REQUIRE_IF_MATCH:
            raise PreconditionRequired()
        return condition

    def claim(
        self,
        request: Request,
        definition: StoreDefinition,
        id: str,
        condition: Condition | None,
        body: Any,
    ) -> idempotency.Claim | None:
        key = idempotency.read_key(request)
        if key is None:
            return None
        method = request.method or ""
        media_type = body_media_type(request)
        return idempotency.claim(
            request,
            key,
            method=method,
            target=f"stores/{definition.name}/{id}",
            fingerprint=idempotency.fingerprint(
                method,
                definition.name,
                id,
                media_type if body is not None else "",
                request.headers.get("If-Match"),
                body,
            ),
        )

    @staticmethod
    def not_committed(exc: BaseException) -> bool:
        """Whether ``exc`` proves the write did not commit (so a claim may be released)."""
        return isinstance(
            exc,
            StoreValidationError
            | WorkflowValueError
            | StoreContentionError
            | PatchError
            | APIException,
        )

    def update(
        self,
        request: Request,
        definition: StoreDefinition,
        id: str,
        condition: Condition | None,
        updater: Updater,
        body: Any,
    ) -> Response:
        claim = self.claim(request, definition, id, condition, body)
        try:
            # One core operation: the ledger first, then read/compute/compare-and-swap with
            # the client's backoff; the updater runs on the state each attempt read.
            write = store_client().update_store_if(
                definition,
                id,
                updater=updater,
                condition=version_condition(condition),
                step_id=claim.step_id if claim else None,
            )
            result = write.result
            if not result.updated:
                raise PreconditionFailed(
                    make_etag(result.actual_instance_id, result.actual_version)
                )
        except BaseException as exc:
            if claim is not None and self.not_committed(exc):
                claim.release()
            raise
        # A replayed result (recorded by an earlier or a concurrent twin request) does not
        # name its instance: the idempotency record remembers it.
        replayed = write.instance_id is None
        instance_id = write.instance_id or (claim.record.instance_id if claim else "")
        if claim is not None and not replayed:
            claim.remember_instance(instance_id)
        return self.write_response(definition, id, result, instance_id or None, replayed)

    @staticmethod
    def write_response(
        definition: StoreDefinition,
        id: str,
        result: StoreUpdateResult,
        instance_id: str | None,
        replayed: bool,
    ) -> Response:
        headers = {"ETag": make_etag(instance_id, result.version)} if instance_id else {}
        body = {
            "name": definition.name,
            "id": id,
            "instance_id": instance_id,
            "previous_version": result.previous_version,
            "version": result.version,
            "state": result.state,
            "replayed": replayed,
        }
        return Response(body, headers=headers)


__all__ = [
    "StoreDefinitionListView",
    "StoreDetailView",
    "StoreIdListView",
    "YieldstarAPIView",
]
