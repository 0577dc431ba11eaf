"""The OpenAPI 3 description of the API (drf-spectacular): shared parameters, headers and
error responses, and the schema view that serves only this API's operations."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.renderers import OpenApiJsonRenderer, OpenApiJsonRenderer2
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema as spectacular_extend_schema,
)
from drf_spectacular.views import SpectacularAPIView
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from ..core.definition import StoreDefinition, registered_definitions
from ..runtime.registry import registered_workflows
from .exceptions import exception_handler
from .permissions import SchemaPermission, hook_allows, store_permission
from .serializers import ErrorSerializer

Method = TypeVar("Method", bound=Callable[..., Any])

ETAG_HEADER = OpenApiParameter(
    "ETag",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description='The store\'s version: `"<instance_id>:<version>"`.',
    response=[200, 304, 412],
)
WRITE_ETAG_HEADER = OpenApiParameter(
    "ETag",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description='The version written (on `412`, the current one): `"<instance_id>:<version>"` '
    "(absent on a replay that cannot name the instance, and on a `412` for a store that does "
    "not exist).",
    response=[200, 412],
)
IF_MATCH = OpenApiParameter(
    "If-Match",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description="Write only if the store is still at this ETag (`412` otherwise, with the "
    "current ETag). `*` matches any version. A store that does not exist matches neither "
    "(`412`, `current_etag` null; nothing is created). Required when `API_REQUIRE_IF_MATCH` "
    "is set (`428` without it, unless `If-None-Match: *`).",
)
IF_MATCH_READ = OpenApiParameter(
    "If-Match",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description="Answer only if the store is still at this ETag (`412` otherwise, with the "
    "current ETag, even where `If-None-Match` would be `304`). `*` matches any version. A "
    "store that does not exist matches neither (`412`, `current_etag` null).",
)
IF_NONE_MATCH_WRITE = OpenApiParameter(
    "If-None-Match",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description="`*` only: write only if the store does not exist (a `PUT` or `PATCH` "
    "creates it; a `DELETE` does nothing), else `412` with the current ETag. Not with "
    "`If-Match`. Satisfies `API_REQUIRE_IF_MATCH`.",
)
IF_NONE_MATCH = OpenApiParameter(
    "If-None-Match",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description="Answer `304` without a body if the store is still at this ETag.",
)
IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description="Makes the write exactly once: a retry with the same key and request gets "
    "the recorded outcome (`replayed: true`); the same key with a different request is "
    "`422`. 1 to 200 printable ASCII characters, scoped to the authenticated user.",
)
NAME = OpenApiParameter(
    "name",
    OpenApiTypes.STR,
    OpenApiParameter.PATH,
    description="A registered store definition.",
)
STORE_ID = OpenApiParameter(
    "id",
    OpenApiTypes.STR,
    OpenApiParameter.PATH,
    description="The store's id (at most 255 characters; it may hold `/`).",
)
CURSOR = OpenApiParameter(
    "cursor",
    OpenApiTypes.STR,
    OpenApiParameter.QUERY,
    description="Opaque position from a page's `next` link.",
)
LIMIT = OpenApiParameter(
    "limit",
    OpenApiTypes.INT,
    OpenApiParameter.QUERY,
    description="Ids per page, 1 to 1000 (default 100; `400` otherwise).",
)

_ERROR_DESCRIPTIONS = {
    400: "Malformed request: bad JSON, a body nested too deeply, a schema rejection "
    "(`invalid_state`, with `issues`), a value that is not durable (`not_durable`), an "
    "invalid patch (`invalid_patch`) or header.",
    401: "Not authenticated (with an authentication scheme that challenges).",
    403: "Not authenticated, no permission, or a failed CSRF check.",
    404: "No such store definition, store id, execution or workflow.",
    409: "A patch does not apply to the state (`patch_conflict`, `patch_test_failed`; also "
    "a JSON Patch whose copies pass `MAX_STATE_BYTES`), or the store is too contended "
    "(`contention`); nothing changed.",
    412: "`If-Match` does not name the current version, or the store does not exist; or "
    "`If-None-Match: *` and the store exists (a write); nothing changed.",
    413: "The body is larger than `API_MAX_BODY_BYTES`.",
    415: "Unsupported `Content-Type`; `accepted_media_types` lists the accepted ones.",
    422: "The `Idempotency-Key` was used with a different request.",
    428: "`If-Match` (or `If-None-Match: *`) is required (`API_REQUIRE_IF_MATCH`).",
    500: "A stored row this answer reads does not decode (`corrupt_row`): the server's data, "
    "not the request, is at fault.",
    503: "The database could not answer (`database_unavailable`: a lock timeout, a lost "
    "connection); `Retry-After` says when to retry.",
}


def extend_schema(**kwargs: Any) -> Callable[[Any], Any]:
    """drf-spectacular's ``extend_schema`` for a view method, extending its ``AutoSchema``
    whatever ``REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"]`` says (the stock decorator extends
    that setting's class, which breaks schema generation in a project that leaves it at
    DRF's default)."""
    decorate = spectacular_extend_schema(**kwargs)

    def decorator(method: Any) -> Any:
        method.kwargs = {"schema": AutoSchema, **getattr(method, "kwargs", {})}
        return decorate(method)

    return decorator


def operation(
    operation_id: str, summary: str, description: str, **details: Any
) -> Callable[[Method], Method]:
    """Declare one endpoint of the API (a view method): its operation id, summary and
    description, which every operation has, then the rest (``request``, ``parameters``,
    ``responses``, ``tags``) as :func:`extend_schema` takes them."""
    return extend_schema(
        operation_id=operation_id, summary=summary, description=description, **details
    )


def errors(*codes: int) -> dict[int, OpenApiResponse]:
    """Error responses (JSON ``ErrorSerializer`` bodies) for ``codes``, and ``503``, which
    every endpoint may answer."""
    return {
        code: OpenApiResponse(ErrorSerializer, description=_ERROR_DESCRIPTIONS[code])
        for code in dict.fromkeys((*codes, 503))
    }


#: The errors any authenticated endpoint may answer.
AUTH_ERRORS = (401, 403)
READ_ERRORS = (400, *AUTH_ERRORS, 404)
WRITE_ERRORS = (400, *AUTH_ERRORS, 404, 409, 412, 413, 415, 422, 428)


def only_yieldstar_endpoints(endpoints: list[Any], **kwargs: Any) -> list[Any]:
    """drf-spectacular preprocessing hook: keep this API's operations only."""
    return [
        endpoint
        for endpoint in endpoints
        if getattr(getattr(endpoint[3], "cls", None), "__module__", "").startswith(
            "yieldstar_django.api."
        )
        and getattr(endpoint[3], "cls", None) is not YieldstarSchemaView
    ]


def may_view_definition(request: Any, definition: StoreDefinition) -> bool:
    """Whether the schema names ``definition`` to ``request``'s user (``None``: a schema
    generated outside a request, such as by ``manage.py spectacular``, names every one)."""
    if request is None:
        return True
    return bool(request.user.has_perm(store_permission("view"))) and hook_allows(
        request, definition, "view", None
    )


def document_registered_names(
    result: dict[str, Any], generator: Any, request: Any, public: bool
) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: list the store definitions the requesting user
    may view (as the API root does: none without ``view_storeinstance``, only those the
    hook lets through) as the ``enum`` of the ``name`` path parameter, and the registered
    workflows as the ``enum`` of ``workflow`` in a start request."""
    names = [d.name for d in registered_definitions() if may_view_definition(request, d)]
    for item in result.get("paths", {}).values():
        for operation in item.values():
            for parameter in operation.get("parameters", []):
                if parameter.get("in") == "path" and parameter.get("name") == "name" and names:
                    parameter["schema"]["enum"] = names
    workflows = [w.name for w in registered_workflows()]
    start = result.get("components", {}).get("schemas", {}).get("ExecutionStartRequest")
    if start and workflows:
        start["properties"]["workflow"]["enum"] = workflows
    return result


class YieldstarSchemaView(SpectacularAPIView):
    """``GET schema/``: the OpenAPI 3 schema of this API, as JSON:
    ``application/vnd.oai.openapi+json`` by default, the same document as
    ``application/json`` to a client that asks for it (``406`` to one that accepts
    neither).

    Open to authenticated users with at least one ``yieldstar`` permission.
    """

    permission_classes = [SchemaPermission]
    renderer_classes = [OpenApiJsonRenderer, OpenApiJsonRenderer2]

    def get_exception_handler(self) -> Callable[[Exception, dict[str, Any]], Response | None]:
        return exception_handler

    def handle_exception(self, exc: Exception) -> Response:
        """Errors are plain JSON, like every other error of the API."""
        response = super().handle_exception(exc)
        self.request.accepted_renderer = JSONRenderer()
        self.request.accepted_media_type = "application/json"
        return response

    custom_settings = {
        "TITLE": "yieldstar_django API",
        "DESCRIPTION": "Shared, versioned JSON stores and durable workflow executions.",
        "VERSION": "1",
        "PREPROCESSING_HOOKS": ["yieldstar_django.api.openapi.only_yieldstar_endpoints"],
        "COMPONENT_SPLIT_REQUEST": True,
        "POSTPROCESSING_HOOKS": [
            "drf_spectacular.hooks.postprocess_schema_enums",
            "yieldstar_django.api.openapi.document_registered_names",
        ],
    }


__all__ = [
    "CURSOR",
    "ETAG_HEADER",
    "IDEMPOTENCY_KEY",
    "IF_MATCH",
    "IF_MATCH_READ",
    "IF_NONE_MATCH",
    "IF_NONE_MATCH_WRITE",
    "LIMIT",
    "NAME",
    "STORE_ID",
    "WRITE_ETAG_HEADER",
    "YieldstarSchemaView",
    "errors",
    "extend_schema",
    "only_yieldstar_endpoints",
    "operation",
]
