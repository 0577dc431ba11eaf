"""What every view of the HTTP API shares: the base view (authentication, permissions,
JSON errors, no ``ATOMIC_REQUESTS``), the store client, checks of a request's body and
path, and a list's page size (see ``docs/internals/architecture.md#api``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from django.db import transaction
from drf_spectacular.openapi import AutoSchema
from rest_framework.exceptions import NotFound, ParseError
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.parsers import BaseParser
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ..conf import yieldstar_settings
from ..connector import get_store_client
from ..core.cas import CasStoreClient
from ..core.constants import MAX_KEY_LENGTH
from ..core.definition import StoreDefinition, get_definition
from .exceptions import (
    BodyRequired,
    RequestTooLarge,
    exception_handler,
)
from .parsers import SafeJSONParser

#: Items per page of a list (the store ids, the executions) without ``?limit=``.
DEFAULT_PAGE_SIZE = 100
#: The most items per page ``?limit=`` may ask for.
MAX_PAGE_SIZE = 1000


def store_client() -> CasStoreClient:
    """The store client of the API's database."""
    return get_store_client()


class ExactContentNegotiation(DefaultContentNegotiation):
    """DRF's negotiation, but a body's parser is the one whose media type is the body's
    ``Content-Type`` exactly (case aside, parameters such as ``charset`` ignored). DRF's own
    also lets a range through (``*/*``, ``application/*``) to the first parser: such a
    ``Content-Type`` names no media type, so no parser takes it (``415``)."""

    def select_parser(self, request: Request, parsers: Iterable[BaseParser]) -> BaseParser | None:
        media_type = body_media_type(request)
        return next((parser for parser in parsers if parser.media_type == media_type), None)


class YieldstarAPIView(APIView):
    """Base view: JSON only, JSON errors, body size guard, no request-wide transaction."""

    renderer_classes = [JSONRenderer]
    parser_classes = [SafeJSONParser]
    content_negotiation_class = ExactContentNegotiation
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


#: What a list answers (``400``, ``parse_error``) to a ``cursor`` it did not make.
INVALID_CURSOR = "The cursor is invalid; use the `next` link of a page."


def requested_page_size(request: Request) -> int:
    """A list's page size: ``?limit=``, an integer from 1 to ``MAX_PAGE_SIZE`` (ASCII
    digits, leading zeros allowed), else ``DEFAULT_PAGE_SIZE`` when absent. Anything else
    is ``400`` (``parse_error``), never quietly another size."""
    raw = request.query_params.get("limit")
    if raw is None:
        return DEFAULT_PAGE_SIZE
    # The number the digits spell, without converting an arbitrarily long string.
    digits = raw.lstrip("0") if raw.isdigit() and raw.isascii() else ""
    if not digits or len(digits) > len(str(MAX_PAGE_SIZE)) or int(digits) > MAX_PAGE_SIZE:
        raise ParseError(f"limit must be an integer from 1 to {MAX_PAGE_SIZE}.")
    return int(digits)


# --- definitions and ids ------------------------------------------------------------------


__all__ = [
    "DEFAULT_PAGE_SIZE",
    "INVALID_CURSOR",
    "MAX_PAGE_SIZE",
    "ExactContentNegotiation",
    "YieldstarAPIView",
    "body_media_type",
    "check_store_id",
    "content_length",
    "definition_or_404",
    "requested_page_size",
    "store_client",
]
