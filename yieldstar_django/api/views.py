"""The store view of the HTTP API: read, replace, patch and delete one store, with ETags
and ``If-Match`` (see ``docs/internals/architecture.md#api``).

Every view refuses anonymous requests and checks model permissions itself (see
:mod:`~yieldstar_django.api.permissions`), renders every error as JSON through
:func:`~yieldstar_django.api.exceptions.exception_handler`, and runs outside
``ATOMIC_REQUESTS``: a store write commits (and wakes) on its own, and user code never runs
inside a request-wide transaction.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse
from rest_framework import status
from rest_framework.exceptions import APIException, NotFound
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.response import Response

from ..conf import yieldstar_settings
from ..core.commits import MISSING_INSTANCE, VersionCondition
from ..core.compute import decode_stored
from ..core.definition import StoreDefinition
from ..core.durable import decode_durable
from ..core.errors import (
    CorruptStateError,
    StoreContentionError,
    StoreValidationError,
    WorkflowValueError,
)
from ..core.results import (
    StoreDeleteConflict,
    StoreSnapshot,
    StoreUpdateConflict,
    StoreUpdateResult,
)
from ..core.store import Replacement
from . import idempotency
from .base import (
    EncodedJSON,
    YieldstarAPIView,
    body_media_type,
    check_store_id,
    definition_or_404,
    store_client,
)
from .conditions import Condition, make_etag, parse_etag, parse_if_match
from .exceptions import (
    InvalidHeader,
    NullState,
    PreconditionFailed,
    PreconditionRequired,
)
from .json_patch import PatchError, apply_patch, parse_patch
from .merge_patch import apply_merge_patch
from .openapi import (
    ETAG_HEADER,
    IDEMPOTENCY_KEY,
    IF_MATCH,
    IF_MATCH_READ,
    IF_NONE_MATCH,
    IF_NONE_MATCH_WRITE,
    NAME,
    READ_ERRORS,
    STORE_ID,
    WRITE_ERRORS,
    WRITE_ETAG_HEADER,
    errors,
    operation,
)
from .parsers import JSON_PATCH, MERGE_PATCH, JsonPatchParser, MergePatchParser, SafeJSONParser
from .permissions import StorePermission, check_hook, store_action
from .serializers import (
    JsonPatchOperationSerializer,
    StoreSnapshotSerializer,
    StoreWriteResultSerializer,
)

Updater = Callable[[Any], Any]
#: What makes a write's updater from its request, the store's definition and parsed body.
UpdaterFor = Callable[[Request, StoreDefinition, Any], Updater]


def missing_store_refusal() -> PreconditionFailed:
    """The 412 of an ``If-Match`` on a store that does not exist (RFC 9110's ``If-Match``,
    ``*`` included, is false without a current representation): no ETag to give."""
    return PreconditionFailed(
        None, "The store does not exist: If-Match matches only a current version."
    )


def refuse(conflict: StoreUpdateConflict | StoreDeleteConflict) -> NoReturn:
    """412 with the ETag of the version the store is at, or none: the store does not exist
    (see ``missing_store_refusal``)."""
    if conflict.actual_instance_id == MISSING_INSTANCE:
        raise missing_store_refusal()
    etag = make_etag(conflict.actual_instance_id, conflict.actual_version)
    if conflict.expected_instance_id == MISSING_INSTANCE:
        raise PreconditionFailed(
            etag, "The store exists: If-None-Match: * writes only a store that does not exist."
        )
    raise PreconditionFailed(etag)


def not_null(updater: Updater) -> Updater:
    """Refuse a write that would make the state ``null`` (an updater returning ``None``
    means "keep the draft", so a store cannot be set to ``null``)."""

    if isinstance(updater, Replacement):
        make = updater.make

        def value() -> Any:
            result = make()
            if result is None:
                raise NullState()
            return result

        return Replacement(value, updater.done)

    def guarded(draft: Any) -> Any:
        result = updater(draft)
        if result is None and draft is not None:
            raise NullState()
        return result

    return guarded


def replacement(request: Request, definition: StoreDefinition, body: Any) -> Updater:
    """PUT's updater, a ``Replacement`` (the old state is never decoded for a draft): the
    body replaces the state. The first attempt gets the parsed body itself (the core only
    reads it: no copy of a large body is held). Once an attempt has encoded the new state,
    the body is emptied (``release``) before the commit, so the commit does not hold the
    body's values beside their text; a later attempt gets a fresh copy decoded from a
    text (the C codec copies a large body many times faster than a walk): without a
    schema the encoded state, which is the body; with one, the body's own text, kept from
    the start, in case the schema changed the body."""
    text = json.dumps(body) if definition.schema is not None else None
    attempts = 0
    encoded: list[str] = []  # without a schema, the new state's text once it is known

    def value() -> Any:
        nonlocal attempts
        attempts += 1
        if text is not None and attempts > 1:
            return decode_durable(text)
        return decode_durable(encoded[0]) if encoded else body

    def done(state: str) -> None:
        if text is None and not encoded:
            encoded.append(state)
        release(body)

    return Replacement(value, done)


def patcher(request: Request, definition: StoreDefinition, body: Any) -> Updater:
    """PATCH's updater: the body as a JSON Patch or a merge patch (by its media type),
    applied to the state each attempt reads. A malformed JSON Patch raises here; its
    ``copy`` operations may copy ``MAX_STATE_BYTES`` in all (each copy of the whole state
    doubles it: a short patch could otherwise grow it past any memory)."""
    media_type = body_media_type(request)
    if media_type == JSON_PATCH:
        operations = parse_patch(body)
        limit = yieldstar_settings.MAX_STATE_BYTES
        return lambda draft: apply_patch(draft, operations, in_place=True, max_copied=limit)
    assert media_type == MERGE_PATCH
    return lambda draft: apply_merge_patch(draft, body, in_place=True)


def release(body: Any) -> None:
    """Empty the parsed ``body`` of a write that is done (its response holds nothing of
    it). DRF's request keeps it (``request.data``) and is held in a reference cycle (with
    its view) until the cyclic collector runs, maybe while the next requests run: emptied,
    the values it held are freed at once."""
    if isinstance(body, (dict, list)):
        body.clear()


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
    nothing, as it matches no ETag this API gives). Either way a missing store matches
    nothing and is not created (``existing_only``)."""
    if condition is None:
        return None
    if condition.absent:
        return VersionCondition(missing_only=True)
    if condition.any:
        return VersionCondition(any_version=True, existing_only=True)
    tags = tuple(v for v in map(parse_etag, condition.tags) if v is not None)
    return VersionCondition(tags, existing_only=True)


def write_method(
    operation_id: str,
    summary: str,
    description: str,
    *,
    bodies: dict[str, Any],
    updater_for: UpdaterFor,
) -> Callable[[StoreDetailView, Request, str, str], Response]:
    """A write method (PUT or PATCH) of :class:`StoreDetailView`: the
    :meth:`~StoreDetailView.write` of ``updater_for``'s updater, documented with the
    request ``bodies`` it takes (by media type) and what every write answers."""

    @operation(
        operation_id,
        summary,
        description,
        request=bodies,
        parameters=[
            NAME,
            STORE_ID,
            IF_MATCH,
            IF_NONE_MATCH_WRITE,
            IDEMPOTENCY_KEY,
            WRITE_ETAG_HEADER,
        ],
        responses={200: StoreWriteResultSerializer, **errors(*WRITE_ERRORS)},
        tags=["stores"],
    )
    def handler(view: StoreDetailView, request: Request, name: str, id: str) -> Response:
        return view.write(request, name, id, updater_for)

    return handler


class StoreDetailView(YieldstarAPIView):
    """``stores/<name>/<id>/``: read, replace, patch or delete one store.

    Writes are compare-and-swaps: with ``If-Match`` on the named version (``412`` with the
    current ETag when it moved, and without one when the store does not exist), without on
    the version just read (retried after a lost race, so a patch always applies to the
    state it commits over). ``Idempotency-Key`` makes a write exactly once (see
    :mod:`~yieldstar_django.api.idempotency`).
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

    @operation(
        "store_retrieve",
        "Read a store",
        "The store's snapshot; its `ETag` names (instance_id, version). A read "
        "never writes: a store that does not exist yet is `404` (`store_not_found`), or "
        "`412` with `If-Match`; the first write creates it from the definition's initial "
        "state. `If-Match` is evaluated before `If-None-Match` (RFC 9110 13.2.2).",
        parameters=[NAME, STORE_ID, IF_MATCH_READ, IF_NONE_MATCH, ETAG_HEADER],
        responses={
            200: StoreSnapshotSerializer,
            304: OpenApiResponse(description="Not modified since the `If-None-Match` ETag."),
            **errors(*READ_ERRORS, 412, 500),
        },
        tags=["stores"],
    )
    def get(self, request: Request, name: str, id: str) -> Response:
        """The snapshot (``HEAD`` too), after RFC 9110's preconditions in its order: a
        false ``If-Match`` is ``412`` (also for a missing store), then a matching
        ``If-None-Match`` ``304``; without ``If-Match`` a missing store is ``404``."""
        definition = self.setup_store(request, name, id)
        match = parse_if_match(request.headers.get("If-Match"))
        none_match = parse_if_match(
            request.headers.get("If-None-Match"), "If-None-Match", weak=True
        )
        stored = store_client().read_store(definition, id)
        if stored is None:
            if match is not None:
                raise missing_store_refusal()
            raise NotFound(
                f"There is no store {id!r} of {definition.name!r} yet; a write creates it "
                "from the definition's initial state.",
                code="store_not_found",
            )
        etag = make_etag(stored.instance_id, stored.version)
        if match is not None and not match.matches(etag):
            raise PreconditionFailed(etag)
        if none_match is not None and none_match.matches(etag):
            return Response(status=status.HTTP_304_NOT_MODIFIED, headers={"ETag": etag})
        state = decode_stored(definition, id, stored.encoded)  # CorruptStateError: 500
        snapshot = StoreSnapshot(state, stored.instance_id, stored.version)
        return Response(snapshot_body(definition, id, snapshot), headers={"ETag": etag})

    # PUT / PATCH / DELETE

    put = write_method(
        "store_replace",
        "Replace a store's state",
        "Validates the body with the definition's schema and commits it as the "
        "next version (compare-and-swap).",
        bodies={"application/json": OpenApiTypes.ANY},
        updater_for=replacement,
    )

    patch = write_method(
        "store_patch",
        "Patch a store's state",
        "`application/merge-patch+json` (RFC 7396) or "
        "`application/json-patch+json` (RFC 6902, `test` included). The patch is applied "
        "to the state it commits over: after a lost race it is applied again to the newer "
        "state, unless `If-Match` pins the version.",
        bodies={
            MERGE_PATCH: OpenApiTypes.ANY,
            JSON_PATCH: JsonPatchOperationSerializer(many=True),
        },
        updater_for=patcher,
    )

    @operation(
        "store_delete",
        "Delete a store",
        "Removes the store and its waiters (waking them). With `If-Match` (`*` "
        "included) a missing store is `412` and stays missing. Without `If-Match` or "
        "`Idempotency-Key` a missing store is left missing (`204`); with `Idempotency-Key` "
        "alone, the delete is a compare-and-swap on a snapshot (a missing store is created "
        "first, as `delete_store_from` does, then deleted).",
        request=None,
        parameters=[NAME, STORE_ID, IF_MATCH, IF_NONE_MATCH_WRITE, IDEMPOTENCY_KEY],
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
        if claim is None and condition is None:
            client.delete_store(definition, id)
            return Response(status=status.HTTP_204_NO_CONTENT)
        with self.released_unless_committed(claim):
            result = client.delete_store_if(
                definition,
                id,
                condition=version_condition(condition) or VersionCondition(any_version=True),
                step_id=claim.step_id if claim else None,
            )
            if not result.deleted:
                refuse(result)
        return Response(status=status.HTTP_204_NO_CONTENT)

    # helpers

    def write(self, request: Request, name: str, id: str, updater_for: UpdaterFor) -> Response:
        """A PUT or PATCH: the store's definition (permission checked), the ``If-Match``
        condition and the parsed body, then the write of
        ``updater_for(request, definition, body)`` (refused if it would make the state
        ``null``); once it succeeded, the body is released (``release``)."""
        definition = self.setup_store(request, name, id)
        condition, body = self.condition(request), self.body(request)
        updater = not_null(updater_for(request, definition, body))
        response = self.update(request, definition, id, condition, updater, body)
        release(body)
        return response

    def condition(self, request: Request) -> Condition | None:
        """The write's precondition: ``If-Match``, or ``If-None-Match: *`` (create only)."""
        condition = parse_if_match(request.headers.get("If-Match"))
        none_match = parse_if_match(request.headers.get("If-None-Match"), "If-None-Match")
        if none_match is not None:
            if condition is not None:
                raise InvalidHeader("Send If-Match or If-None-Match with a write, not both.")
            if not none_match.any:
                raise InvalidHeader(
                    'If-None-Match on a write takes only "*": write only if the store does '
                    "not exist."
                )
            condition = Condition(True, (), absent=True)
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
                # Only when sent, so that the keys recorded before it was read still match.
                *(["If-None-Match: *"] if condition is not None and condition.absent else []),
            ),
        )

    @contextmanager
    def released_unless_committed(self, claim: Any) -> Iterator[None]:
        """Release the idempotency ``claim`` (if any) when the write raises an error that
        proves it did not commit; any other error keeps it (the write may have committed)."""
        try:
            yield
        except BaseException as exc:
            if claim is not None and self.not_committed(exc):
                claim.release()
            raise

    @staticmethod
    def not_committed(exc: BaseException) -> bool:
        """Whether ``exc`` proves the write did not commit (so a claim may be released)."""
        return isinstance(
            exc,
            StoreValidationError
            | WorkflowValueError
            | StoreContentionError
            | CorruptStateError
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
        with self.released_unless_committed(claim):
            # One core operation: the ledger first, then read/compute/compare-and-swap with
            # the client's backoff; the updater runs on the state each attempt read.
            write = store_client().update_store_if(
                definition,
                id,
                updater=updater,
                condition=version_condition(condition),
                step_id=claim.step_id if claim else None,
            )
            if write.encoded is None:  # else committed by this call
                result = write.result
                if not result.updated:
                    refuse(result)
        # A replayed result (recorded by an earlier or a concurrent twin request) does not
        # name its instance: the idempotency record remembers it (or the store's history).
        replayed = write.instance_id is None
        instance_id = write.instance_id or ""
        state: Any
        if write.encoded is not None and write.versions is not None:
            # Answered with the committed text itself: the state is not decoded again.
            state, (previous_version, version) = EncodedJSON(write.encoded), write.versions
        else:
            result = write.result
            assert isinstance(result, StoreUpdateResult)
            state, previous_version, version = result.state, result.previous_version, result.version
        if claim is not None and replayed:
            instance_id = claim.recorded_instance(definition.name, id, version)
        elif claim is not None:
            claim.remember_instance(instance_id)
        headers = {"ETag": make_etag(instance_id, version)} if instance_id else {}
        body = {
            "name": definition.name,
            "id": id,
            "instance_id": instance_id or None,
            "previous_version": previous_version,
            "version": version,
            "state": state,
            "replayed": replayed,
        }
        return Response(body, headers=headers)


__all__ = ["StoreDetailView"]
