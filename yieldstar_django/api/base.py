"""What every view of the HTTP API shares: the base view (authentication, permissions,
JSON errors, no ``ATOMIC_REQUESTS``), the store client, checks of a request's body and
path, a list's page size, and the JSON renderer that writes a stored state's canonical
text as it is (see ``docs/internals/architecture.md#api``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, ClassVar, Final

from django.db import transaction
from django.http import HttpRequest, QueryDict
from drf_spectacular.openapi import AutoSchema
from rest_framework.exceptions import NotFound, ParseError, UnsupportedMediaType
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
from ..core.durable import decode_durable
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


class EncodedJSON:
    """A value given as its canonical JSON text (``encode_durable``'s: sorted keys, no
    white space, non-ASCII characters as they are), for ``YieldstarJSONRenderer`` to write
    as it is rather than decode it to Python objects and encode it again."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


class YieldstarJSONRenderer(JSONRenderer):
    """DRF's ``JSONRenderer``, which also renders a dict whose members are
    ``EncodedJSON``: with DRF's defaults (no ``indent``, ``COMPACT_JSON``,
    ``UNICODE_JSON``) a canonical text is exactly what DRF would render from its decoded
    value, so it is written as it is (with the same escapes of U+2028 and U+2029); with
    other settings it is decoded and rendered as any value."""

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Any = None,
    ) -> bytes:
        if not isinstance(data, dict) or not any(
            type(value) is EncodedJSON for value in data.values()
        ):
            return super().render(data, accepted_media_type, renderer_context)
        indent = self.get_indent(accepted_media_type or "", renderer_context or {})
        if indent is not None or self.ensure_ascii or not self.compact:
            decoded = {
                key: decode_durable(value.text) if type(value) is EncodedJSON else value
                for key, value in data.items()
            }
            return super().render(decoded, accepted_media_type, renderer_context)
        parts: list[str] = []  # joined once: a large text is copied once, into the output
        for key, value in data.items():
            text = value.text if type(value) is EncodedJSON else self.dumps(value)
            parts += (",", self.dumps(key), ":", _script_safe(text))
        parts[0] = "{"
        parts.append("}")
        return "".join(parts).encode()

    def dumps(self, value: Any) -> str:
        """``value`` as ``render`` encodes it (without an ``indent``)."""
        return json.dumps(
            value,
            cls=self.encoder_class,
            ensure_ascii=self.ensure_ascii,
            allow_nan=not self.strict,
            separators=(",", ":"),
        )


def _script_safe(text: str) -> str:
    """``text`` with U+2028 and U+2029 escaped, as ``JSONRenderer`` does (searched for
    first: a large text without them is not copied)."""
    if "\u2028" in text or "\u2029" in text:
        text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return text


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


class UnparsedFormRequest(Request):
    """DRF's request, but ``POST`` (the form fields) is always empty: the API takes no form
    body, and DRF's would parse the whole body when an authentication class reads it
    (``SessionAuthentication``'s CSRF check looks for a form token), before the
    permissions are checked. The body is parsed only when a view reads ``data``."""

    @property
    def POST(self) -> QueryDict:  # type: ignore[override]
        return QueryDict("", encoding=self._request.encoding)


#: The methods that change something: their ``Content-Type`` must be one the view parses.
WRITE_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: ``Sec-Fetch-Site`` values of a browser request made by a page of another origin.
CROSS_ORIGIN_FETCH: Final = frozenset({"cross-site", "same-site"})
#: The media types a page of another origin can send without a CORS preflight (an HTML
#: form's and a simple request's): a write refuses them even without a body.
SIMPLE_MEDIA_TYPES: Final = frozenset(
    {"application/x-www-form-urlencoded", "multipart/form-data", "text/plain"}
)


def check_write_media_type(request: Request, accepted: Iterable[str]) -> None:
    """``415`` unless a write's body is one the view takes (``accepted``), so that a page
    of another site cannot make a browser send it with credentials the browser holds
    (basic authentication, say) by an HTML form or a simple request, which carry only form
    or text bodies:

    - a body needs a ``Content-Type`` among ``accepted``;
    - without a body, a form or text ``Content-Type`` is refused all the same, and so is
      none at all from a browser page of another origin (``Sec-Fetch-Site``), which can
      send a bodiless ``POST`` without one (``fetch``): it must declare a JSON one, which
      the browser sends only after a CORS preflight.
    """
    media_type = body_media_type(request)
    accepted = list(accepted)
    has_body = content_length(request) > 0 or "Transfer-Encoding" in request.headers
    if has_body and media_type not in accepted:
        raise UnsupportedMediaType(media_type or "(none)")
    if media_type in SIMPLE_MEDIA_TYPES and media_type not in accepted:
        raise UnsupportedMediaType(media_type)
    if not media_type and request.headers.get("Sec-Fetch-Site", "").lower() in CROSS_ORIGIN_FETCH:
        raise UnsupportedMediaType(
            "(none)",
            "A write from a page of another origin must declare a Content-Type "
            f"({accepted[0]}), even without a body.",
        )


class YieldstarAPIView(APIView):
    """Base view: JSON only, JSON errors, body size guard, no request-wide transaction.

    The permissions are checked before anything reads the body: the body is parsed only
    when the view reads it (``body``), and an authentication class reading the form
    fields finds none (``UnparsedFormRequest``). A write's ``Content-Type`` must then be
    one of the view's parsers' (``check_write_media_type``), its size within
    ``API_MAX_BODY_BYTES``."""

    renderer_classes = [YieldstarJSONRenderer]
    parser_classes = [SafeJSONParser]
    content_negotiation_class = ExactContentNegotiation
    #: drf-spectacular's schema class on the views themselves: the project need not set
    #: ``REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"]`` (which would change its other views too).
    schema = AutoSchema()
    body_methods: ClassVar[frozenset[str]] = frozenset({"POST", "PUT", "PATCH"})
    #: The methods whose ``Content-Type`` is checked (``check_write_media_type``).
    write_methods: ClassVar[frozenset[str]] = WRITE_METHODS

    def initialize_request(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Request:
        """DRF's request, as ``UnparsedFormRequest``."""
        return UnparsedFormRequest(
            request,
            parsers=self.get_parsers(),
            authenticators=self.get_authenticators(),
            negotiator=self.get_content_negotiator(),
            parser_context=self.get_parser_context(request),
        )

    @classmethod
    def as_view(cls, **initkwargs: Any) -> Any:
        return transaction.non_atomic_requests(super().as_view(**initkwargs))

    def get_exception_handler(self) -> Callable[[Exception, dict[str, Any]], Response | None]:
        return exception_handler

    def finalize_response(
        self, request: Request, response: Response, *args: Any, **kwargs: Any
    ) -> Response:
        """DRF's, and once the response is sent and closed, the view and the response let
        go of each other (``_let_go``)."""
        response = super().finalize_response(request, response, *args, **kwargs)
        response._resource_closers.append(partial(_let_go, self, response))  # type: ignore[attr-defined]
        return response

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        if request.method in self.write_methods:
            check_write_media_type(request, (parser.media_type for parser in self.get_parsers()))
        if request.method in self.body_methods:
            limit = yieldstar_settings.API_MAX_BODY_BYTES
            if content_length(request) > limit:
                raise RequestTooLarge(f"The request body is larger than {limit} bytes.")

    def body(self, request: Request) -> Any:
        """The parsed body; ``400`` when there is none."""
        if content_length(request) <= 0:
            raise BodyRequired()
        return request.data


def _let_go(view: APIView, response: Response) -> None:
    """Break the reference cycle of a closed response and its view (``view.response``,
    ``response.renderer_context``): the response, its data and its rendered content (a
    large state's text, twice) are freed as soon as the server drops it, not whenever the
    cyclic collector next runs, maybe during a later request, adding to its peak."""
    view.__dict__.pop("response", None)
    response.renderer_context = {}  # type: ignore[attr-defined]


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
    "WRITE_METHODS",
    "EncodedJSON",
    "ExactContentNegotiation",
    "UnparsedFormRequest",
    "YieldstarAPIView",
    "YieldstarJSONRenderer",
    "body_media_type",
    "check_store_id",
    "check_write_media_type",
    "content_length",
    "definition_or_404",
    "requested_page_size",
    "store_client",
]
