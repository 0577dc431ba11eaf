"""The API's errors and the exception handler that renders every error as JSON.

Every error body is ``{"detail": str, "code": str, ...}``; some codes add members
(``issues`` for a schema rejection, ``path`` for a non-durable value, ``current_etag`` for
a failed precondition, ``null`` when the store does not exist). The handler never lets a
store error become a ``500``; the one ``500`` the API answers is ``corrupt_row``, a stored
row whose JSON does not decode (the server's data at fault, not the request): found by the
views (``decode_row``) or by a write's core (``CorruptStateError``).
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied, SuspiciousOperation
from django.db import OperationalError
from django.http import Http404
from rest_framework.exceptions import (
    APIException,
    ErrorDetail,
    NotFound,
    PermissionDenied,
    UnsupportedMediaType,
    ValidationError,
)
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from ..core.durable import decode_durable
from ..core.errors import (
    CorruptStateError,
    StoreContentionError,
    StoreStepMismatchError,
    StoreValidationError,
    WorkflowValueError,
)
from .json_patch import InvalidPatch, PatchConflict, PatchTestFailed

#: The status and default detail of each code the API's own errors (``APIError``) answer.
ERROR_CODES: dict[str, tuple[int, str]] = {
    "request_too_large": (413, "The request body is too large."),
    "body_required": (400, "This request needs a JSON body."),
    "null_state": (400, "A store's state cannot be replaced by null."),
    "precondition_failed": (412, "The store has changed since the version named in If-Match."),
    "precondition_required": (
        428,
        "This server requires If-Match on writes; GET the store for its ETag.",
    ),
    "idempotency_key_reused": (
        422,
        "This Idempotency-Key was already used with a different request.",
    ),
    "invalid_header": (400, "A request header is malformed."),
    "contention": (409, "The store is too busy; nothing was changed. Retry later."),
    "database_unavailable": (
        503,
        "The database could not answer (busy or unavailable). Retry later; a write with an "
        "Idempotency-Key is safe to retry.",
    ),
    "unknown_workflow": (400, "No workflow of that name is registered."),
    "invalid_arguments": (400, "The arguments do not match the workflow's signature."),
    "execution_conflict": (409, "The execution cannot be changed that way."),
    "invalid_fork_point": (400, "The execution has fewer recorded steps than from_step."),
    "invalid_schedule": (400, "The schedule cannot be kept (see detail); nothing was stored."),
    "corrupt_row": (
        500,
        "Stored data of this resource does not decode (the server's data, not the request, "
        "is at fault; the server logged which row). Nothing was changed.",
    ),
}


class APIError(APIException):
    """An error the API answers with ``{"detail": str, "code": str}``.

    A subclass names its code as a class keyword (``class Gone(APIError, code="gone")``);
    ``ERROR_CODES`` gives the code's status and default detail.
    """

    def __init_subclass__(cls, *, code: str, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.status_code, cls.default_detail = ERROR_CODES[code]
        cls.default_code = code


class RequestTooLarge(APIError, code="request_too_large"):
    """The request body is larger than ``API_MAX_BODY_BYTES``."""


class BodyRequired(APIError, code="body_required"):
    """A write without a body."""


class NullState(APIError, code="null_state"):
    """A write whose result is ``null``: a store's state cannot be set to ``null``."""


class PreconditionFailed(APIError, code="precondition_failed"):
    """``If-Match`` named another version than the current one, or the store does not
    exist (``current_etag`` ``None``: there is no current version); nothing changed."""

    def __init__(self, current_etag: str | None, detail: str | None = None) -> None:
        super().__init__(detail)
        self.current_etag = current_etag


class PreconditionRequired(APIError, code="precondition_required"):
    """``API_REQUIRE_IF_MATCH`` is set and the write has no ``If-Match`` (nor
    ``If-None-Match: *``)."""


class IdempotencyKeyReused(APIError, code="idempotency_key_reused"):
    """The ``Idempotency-Key`` was used before with a different request."""


class InvalidHeader(APIError, code="invalid_header"):
    """A header the API reads is malformed."""


class Contention(APIError, code="contention"):
    """The compare-and-swap retry cap was reached; nothing was committed. Retry later."""


class DatabaseUnavailable(APIError, code="database_unavailable"):
    """The database raised an ``OperationalError``: a lock it waited on past its timeout
    (SQLite's "database is locked"), a lost connection, a restart. Retry later."""


class CorruptRow(APIError, code="corrupt_row"):
    """A stored row holds JSON text that does not decode (written by hand, or by another
    program writing the tables): ``500``, as the fault is the server's data."""


#: Seconds a client should wait before retrying a ``database_unavailable`` answer.
RETRY_AFTER_SECONDS = 1

logger = logging.getLogger(__name__)


def decode_row(text: str, row: str) -> Any:
    """``decode_durable(text)`` of a stored column; ``CorruptRow`` when it does not decode,
    logged as an error naming ``row`` (which column of which row)."""
    try:
        return decode_durable(text)
    except (ValueError, RecursionError) as exc:
        logger.error("corrupt row: %s does not decode as JSON: %.200s", row, exc)
        raise CorruptRow() from None


def _path(path: Any) -> list[Any]:
    """A path as a JSON array; a key holding lone surrogates (which a UTF-8 response cannot
    carry) names them by the ``\\udXXX`` escapes a body writes them with."""
    return [_segment(segment) for segment in path]


def _segment(segment: Any) -> Any:
    if isinstance(segment, str):
        try:
            segment.encode("utf-8")
        except UnicodeEncodeError:
            return segment.encode("utf-8", "backslashreplace").decode("utf-8")
    return segment


def _error(status_code: int, code: str, detail: str, **extra: Any) -> Response:
    return Response({"detail": detail, "code": code, **extra}, status=status_code)


def _accepted_media_types(context: dict[str, Any]) -> list[str]:
    """The media types the view's parsers accept for this request."""
    view = context.get("view")
    parsers = view.get_parsers() if view is not None else []
    return [parser.media_type for parser in parsers]


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF exception handler for the yieldstar views (set per view, not project-wide)."""
    if isinstance(exc, StoreValidationError):
        return _error(
            400,
            "invalid_state",
            str(exc),
            issues=[{"message": i["message"], "path": _path(i["path"])} for i in exc.issues],
        )
    if isinstance(exc, WorkflowValueError):
        return _error(400, "not_durable", str(exc), path=_path(exc.path))
    if isinstance(exc, StoreContentionError):
        exc = Contention()
    if isinstance(exc, CorruptStateError):
        # A write (or read) through the core found the store's stored state undecodable.
        logger.error(
            "corrupt row: the state of store %r of %r does not decode as JSON: %s",
            exc.store_id,
            exc.store_name,
            exc.reason,
        )
        exc = CorruptRow()
    if isinstance(exc, OperationalError):
        logger.warning("the database could not answer an API request", exc_info=exc)
        exc = DatabaseUnavailable()
    if isinstance(exc, StoreStepMismatchError):
        # The key's ledger entry records another kind of write (e.g. a DELETE's).
        exc = IdempotencyKeyReused()
    if isinstance(exc, InvalidPatch):
        return _error(400, "invalid_patch", str(exc), operation=exc.index)
    if isinstance(exc, PatchTestFailed):
        return _error(409, "patch_test_failed", str(exc), operation=exc.index)
    if isinstance(exc, PatchConflict):
        return _error(409, "patch_conflict", str(exc), operation=exc.index)
    if isinstance(exc, SuspiciousOperation):
        return _error(400, "bad_request", str(exc) or "Bad request.")
    # Django's own (DRF's content negotiation raises Http404 for an unknown ?format=; a
    # permission hook may raise PermissionDenied): DRF's as its handler maps them, so
    # that they get a code below too.
    if isinstance(exc, Http404):
        exc = NotFound(*exc.args)
    elif isinstance(exc, DjangoPermissionDenied):
        exc = PermissionDenied(*exc.args)
    response = drf_exception_handler(exc, context)
    if response is None or not isinstance(exc, APIException):
        return response
    detail = exc.detail
    if isinstance(exc, ValidationError) or not isinstance(detail, (str, ErrorDetail)):
        response.data = {"detail": "Invalid input.", "code": "invalid", "field_errors": detail}
    else:
        response.data = {"detail": str(detail), "code": getattr(detail, "code", "error")}
    if isinstance(exc, UnsupportedMediaType):
        accepted = _accepted_media_types(context)
        response.data["detail"] = f"{response.data['detail']} Send one of: {', '.join(accepted)}."
        response.data["accepted_media_types"] = accepted
    if isinstance(exc, DatabaseUnavailable):
        response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    if isinstance(exc, PreconditionFailed):
        response.data["current_etag"] = exc.current_etag
        if exc.current_etag is not None:
            response.headers["ETag"] = exc.current_etag
    return response


__all__ = [
    "ERROR_CODES",
    "APIError",
    "BodyRequired",
    "Contention",
    "CorruptRow",
    "DatabaseUnavailable",
    "IdempotencyKeyReused",
    "InvalidHeader",
    "NullState",
    "PreconditionFailed",
    "PreconditionRequired",
    "RequestTooLarge",
    "decode_row",
    "exception_handler",
]
