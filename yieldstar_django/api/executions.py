"""Execution endpoints: start a workflow, list executions, read one with its heap, cancel,
retry or fork one.

``POST executions/`` needs ``yieldstar.add_execution``, ``GET executions/`` and
``GET executions/<id>/`` ``view_execution`` and ``POST executions/<id>/cancel/``
``change_execution``, ``POST executions/<id>/retry/`` ``retry_execution`` and
``POST executions/<id>/fork/`` ``fork_execution``; a workflow's permission hook then narrows
each (``start`` with the arguments, ``list``, ``view``, ``cancel``, ``retry`` and ``fork``
with the execution): an execution the user may
not view is left out of the list, and one it may neither view nor act on is ``404``, as if
there were none. A start or a cancel answers the execution whole only to a user who may
view it; to one who may not, what it may know: a start its own execution's summary, a
cancel the id and status. A start keeps the contract of ``start_workflow``
(``runtime.starts``): arguments that do not bind are ``400``, an existing id with another
workflow or other arguments ``409``, with equal ones ``200``. A start that names an
existing execution the user may neither view nor did start (``Execution.started_by``, or
its own ``Idempotency-Key``'s id) is ``409`` with one message whatever that execution is
(its workflow, arguments and status stay unsaid); one the user started answers as its
first start did, with ``200``.
A start is idempotent with an ``execution_id`` in the body (that id names one execution,
ever) or with an ``Idempotency-Key`` (which names the execution for the user,
``http:<user pk>:<digest>``). A client may not pick an id in the namespaces the server
derives ids in (``http:``, ``admin:``; ``400``), so no one can take the execution another
user's key names, nor the ledger owner of HTTP or admin writes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from datetime import UTC
from types import SimpleNamespace
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from django.conf import settings
from django.urls import reverse
from django.utils.crypto import salted_hmac
from django.utils.dateparse import parse_datetime
from django.utils.timezone import is_naive
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, PolymorphicProxySerializer
from rest_framework import status
from rest_framework.exceptions import NotFound, ParseError, PermissionDenied
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

from ..core.constants import MAX_KEY_LENGTH
from ..core.errors import WorkflowValueError
from ..models.runtime import Execution, ExecutionRun, ExecutionStatus, ExecutionStep
from ..principals import http_principal
from ..runtime.errors import ExecutionConflictError
from ..runtime.executions import cancel_execution, start_execution, waited_stores
from ..runtime.queues import enqueue, get_queue, queue_position
from ..runtime.registry import get_workflow
from ..runtime.repairs import ExecutionStateError, ForkPointError, fork_execution, retry_execution
from ..runtime.starts import bind_arguments
from ..runtime.steps import step_target
from . import idempotency
from .base import (
    DEFAULT_PAGE_SIZE,
    INVALID_CURSOR,
    MAX_PAGE_SIZE,
    YieldstarAPIView,
    requested_page_size,
)
from .exceptions import APIError, decode_row
from .openapi import IDEMPOTENCY_KEY, errors, operation
from .permissions import (
    ExecutionPermission,
    any_execution_hook,
    execution_hook_allows,
    may_execution,
    start_hook_allows,
)
from .serializers import (
    ExecutionCancelledSerializer,
    ExecutionForkSerializer,
    ExecutionPageSerializer,
    ExecutionSerializer,
    ExecutionStartSerializer,
    ExecutionSummarySerializer,
)


class UnknownWorkflow(APIError, code="unknown_workflow"):
    """A start names no registered workflow."""


class InvalidArguments(APIError, code="invalid_arguments"):
    """A start's arguments do not bind to the workflow's signature."""


class UnknownQueue(APIError, code="unknown_queue"):
    """A start names no defined queue (``define_queue``)."""


class ExecutionConflict(APIError, code="execution_conflict"):
    """The execution's status does not allow the change asked for."""


class InvalidForkPoint(APIError, code="invalid_fork_point"):
    """A fork's ``from_step`` is more than the execution's recorded steps."""


#: What a start answers (``409``) when its ``execution_id`` names an execution the user may
#: not view: the same words whatever that execution is.
ID_TAKEN = "The execution_id names an existing execution; nothing was started."


def column(text: str, row: str) -> Any:
    """A ``*_json`` column's value: ``None`` for ``""`` (none recorded); ``500``
    ``corrupt_row`` (logged, naming ``row``) when it does not decode."""
    return decode_row(text, row) if text else None


def execution_input(execution: Execution) -> Any:
    """``{"args", "kwargs"}`` the execution was started with (``500`` ``corrupt_row`` when
    the column does not decode)."""
    return decode_row(execution.input_json, f"execution {execution.id!r} input_json")


def execution_body(execution: Execution) -> dict[str, Any]:
    """An execution, the stores it waits on, its runs and its heap, in replay order (four
    queries). A column that does not decode is ``500`` ``corrupt_row``."""
    steps = ExecutionStep.objects.filter(execution=execution).order_by("position", "pk")
    row = f"execution {execution.id!r}"
    return {
        "id": execution.id,
        "workflow": execution.workflow_id,
        "status": execution.status,
        "input": execution_input(execution),
        "result": column(execution.result_json, f"{row} result_json"),
        "error": column(execution.error_json, f"{row} error_json"),
        "waiting_on": waited_stores(execution),
        "wake_at": execution.wake_at,
        "runs": execution.runs,
        "run_history": [
            {
                "number": run.number,
                "worker": run.worker,
                "started_at": run.started_at,
                "ended_at": run.ended_at,
                "outcome": run.outcome or None,
            }
            for run in ExecutionRun.objects.filter(execution_id=execution.id).order_by(
                "number", "pk"
            )
        ],
        "retries": execution.retries,
        "forked_from": execution.forked_from or None,
        "fork_step": execution.fork_step,
        "queue": execution.queue or None,
        "position": queue_position(execution.id)
        if execution.status == ExecutionStatus.QUEUED
        else None,
        "parent": execution.parent or None,
        "deadline": execution.deadline,
        "created_at": execution.created_at,
        "updated_at": execution.updated_at,
        "finished_at": execution.finished_at,
        "steps": [
            {
                "key": step.step_key,
                "position": step.position,
                "kind": step.kind,
                "target": step_target(step.kind, step.fingerprint),
                "status": step.status,
                "value": column(step.value_json, f"{row} step {step.step_key!r} value_json"),
                "error": column(step.error_json, f"{row} step {step.step_key!r} error_json"),
                "attempts": step.attempts,
                "wake_at": step.wake_at,
                "started_at": step.created_at,
                "recorded_at": step.recorded_at,
            }
            for step in steps
        ],
    }


def execution_summary(request: Request, execution: Execution) -> dict[str, Any]:
    """An execution as the list shows it: no input, result, error or steps."""
    return {
        "id": execution.id,
        "workflow": execution.workflow_id,
        "status": execution.status,
        "created_at": execution.created_at,
        "updated_at": execution.updated_at,
        "finished_at": execution.finished_at,
        "url": detail_url(request, execution.id),
    }


def execution_or_404(execution_id: str) -> Execution:
    if len(execution_id) > MAX_KEY_LENGTH or "\x00" in execution_id:
        raise NotFound("There is no such execution.")
    execution = Execution.objects.filter(pk=execution_id).first()
    if execution is None:
        raise NotFound("There is no such execution.")
    return execution


def refuse_unless(request: Request, action: str, execution: Execution) -> None:
    """``403`` unless the workflow's hook allows ``action``; ``404`` (as for an execution
    that does not exist) when the user may not view the execution either."""
    if execution_hook_allows(request, action, execution):
        return
    if action != "view" and may_execution(request, "view", execution):
        raise PermissionDenied(f"You may not {action} this execution.")
    raise NotFound("There is no such execution.")


def own_start(request: Request, execution: Execution) -> bool:
    """Whether this user started ``execution`` over the HTTP API: its ``started_by`` is
    the user's principal, or its id is one only this user's ``Idempotency-Key`` names
    (executions started before ``started_by`` was recorded)."""
    principal = http_principal(request.user.pk)
    return execution.started_by == principal or execution.id.startswith(principal + ":")


def check_arguments(workflow: Any, args: list[Any], kwargs: dict[str, Any]) -> None:
    """``400`` naming the problem unless ``fn(step, *args, **kwargs)`` binds: the start's
    own rule (``runtime.starts.bind_arguments``), checked before the permission hook sees
    the arguments."""
    try:
        bind_arguments(workflow, args, kwargs)
    except TypeError as exc:
        raise InvalidArguments(f"{exc}.") from None


#: A sealed cursor starts with this (not a base64 character, so never a plain cursor's).
SEALED_PREFIX: Final = "s."
#: The salt of the key that seals cursors (derived from ``SECRET_KEY``).
CURSOR_KEY_SALT: Final = "yieldstar_django.api.executions.cursor"
NONCE_BYTES: Final = 12


def cursor_cipher() -> AESGCM:
    """AES-256-GCM under a key derived from ``SECRET_KEY`` for sealing cursors."""
    return AESGCM(salted_hmac(CURSOR_KEY_SALT, "AES-GCM key", algorithm="sha256").digest())


def seal_cursor(plain: str) -> str:
    """``plain`` (a DRF cursor) encrypted and authenticated: nothing in it can be read or
    changed without ``SECRET_KEY``."""
    nonce = os.urandom(NONCE_BYTES)
    sealed = cursor_cipher().encrypt(nonce, plain.encode("ascii"), CURSOR_KEY_SALT.encode())
    return SEALED_PREFIX + base64.urlsafe_b64encode(nonce + sealed).decode("ascii").rstrip("=")


def unseal_cursor(token: str) -> str:
    """The DRF cursor a :func:`seal_cursor` token holds; ``400`` for any other token."""
    body = token.removeprefix(SEALED_PREFIX)
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        plain = cursor_cipher().decrypt(
            raw[:NONCE_BYTES], raw[NONCE_BYTES:], CURSOR_KEY_SALT.encode()
        )
        return plain.decode("ascii")
    except (ValueError, binascii.Error, InvalidTag):
        raise ParseError(INVALID_CURSOR) from None


class ExecutionPagination(CursorPagination):
    """Newest first; ``limit`` from 1 to 1000 (default 100), read as the store-id list
    reads it (``400`` for anything else); a ``cursor`` it did not make is ``400``
    (``parse_error``), as on the store-id list, where DRF answers ``404``.

    DRF's cursor holds the creation time of the first or last execution of the page read.
    When that page holds an execution a hook hides from the user (the view sets
    ``sealed``), its links carry the cursor sealed (:func:`seal_cursor`), so they tell
    nothing of those executions."""

    ordering = ("-created_at", "-id")
    page_size = DEFAULT_PAGE_SIZE
    invalid_cursor_message = INVALID_CURSOR
    #: Whether the ``next`` and ``previous`` links carry sealed cursors.
    sealed = False

    def encode_cursor(self, cursor: Any) -> str:
        url = super().encode_cursor(cursor)
        if not self.sealed:
            return url
        plain = parse_qs(urlsplit(url).query)[self.cursor_query_param][0]
        assert self.base_url is not None  # set by paginate_queryset
        return replace_query_param(self.base_url, self.cursor_query_param, seal_cursor(plain))

    def get_page_size(self, request: Request) -> int:
        """``?limit=`` (``400`` out of range or not a number, where DRF's falls back to the
        default)."""
        return requested_page_size(request)

    def decode_cursor(self, request: Request) -> Any:
        """DRF's cursor, refusing (``400``) one that is not strict base64 (DRF's decoder
        skips what is not base64, so ``%%%`` would be the first page), that DRF cannot
        read (its ``404``), or whose position is not a time the database can compare
        with: with ``USE_TZ`` an aware one, whose UTC form a ``datetime`` can hold; its
        position is then that UTC form (PostgreSQL refuses a literal in an offset past
        15:59, which a forged cursor can name)."""
        encoded = request.query_params.get(self.cursor_query_param)
        if encoded is not None:
            if encoded.startswith(SEALED_PREFIX):
                encoded = unseal_cursor(encoded)
            try:
                base64.b64decode(encoded.encode("ascii"), validate=True)
            except (ValueError, binascii.Error):
                raise ParseError(self.invalid_cursor_message) from None
        try:
            # a Cursor (its position typed int by the stubs), read from the plain cursor
            plain: Any = SimpleNamespace(query_params={self.cursor_query_param: encoded})
            cursor: Any = super().decode_cursor(request if encoded is None else plain)
        except NotFound:
            raise ParseError(self.invalid_cursor_message) from None
        position = getattr(cursor, "position", None)
        if position is None:
            return cursor
        try:
            moment = parse_datetime(position)
            if moment is not None and settings.USE_TZ:
                moment = None if is_naive(moment) else moment.astimezone(UTC)
            elif moment is not None and not is_naive(moment):
                moment = None
        except (ValueError, OverflowError):
            moment = None
        if moment is None:
            raise ParseError(self.invalid_cursor_message)
        return cursor._replace(position=str(moment))


def list_filters(request: Request) -> dict[str, str] | None:
    """``workflow``, ``schedule``, ``parent`` and ``status`` query filters (``None``: a
    workflow or schedule name, or a parent id, no execution can have); ``400`` for an
    unknown status."""
    filters: dict[str, str] = {}
    workflow = request.query_params.get("workflow")
    if workflow is not None:
        if len(workflow) > MAX_KEY_LENGTH or "\x00" in workflow:
            return None
        filters["workflow_id"] = workflow
    for param in ("schedule", "parent"):
        value = request.query_params.get(param)
        if value is not None:
            if not value or len(value) > MAX_KEY_LENGTH or "\x00" in value:
                return None
            filters[param] = value
    wanted = request.query_params.get("status")
    if wanted is not None:
        if wanted not in ExecutionStatus.values:
            choices = ", ".join(ExecutionStatus.values)
            raise ParseError(f"status must be one of: {choices}.")
        filters["status"] = wanted
    return filters


def detail_url(request: Request, execution_id: str) -> str:
    namespace = request.resolver_match.namespace if request.resolver_match else ""
    name = f"{namespace}:execution-detail" if namespace else "execution-detail"
    return request.build_absolute_uri(reverse(name, args=[execution_id]))


class ExecutionStartView(YieldstarAPIView):
    """``POST executions/``: start a workflow; ``GET executions/``: list executions."""

    permission_classes = [ExecutionPermission]

    def execution_action(self, request: Request) -> str:
        return "add" if request.method == "POST" else "view"

    @operation(
        "executions_list",
        "List executions",
        "Executions, newest first, one page at a time (`next` and `previous` "
        "links), optionally of one `workflow`, started by one `schedule`, in one "
        "`status`, or the children of one `parent` (the execution that started them with "
        "`step.start`).",
        parameters=[
            OpenApiParameter("workflow", OpenApiTypes.STR, OpenApiParameter.QUERY),
            OpenApiParameter(
                "schedule",
                OpenApiTypes.STR,
                OpenApiParameter.QUERY,
                description="The schedule whose ticks (or triggers) started them.",
            ),
            OpenApiParameter(
                "parent",
                OpenApiTypes.STR,
                OpenApiParameter.QUERY,
                description="Id of the execution whose children to list.",
            ),
            OpenApiParameter(
                "status", OpenApiTypes.STR, OpenApiParameter.QUERY, enum=ExecutionStatus.values
            ),
            OpenApiParameter(
                "cursor",
                OpenApiTypes.STR,
                OpenApiParameter.QUERY,
                description="Opaque position from a page's `next` or `previous` link.",
            ),
            OpenApiParameter(
                "limit",
                OpenApiTypes.INT,
                OpenApiParameter.QUERY,
                description=f"Executions per page, 1 to {MAX_PAGE_SIZE} (default "
                f"{DEFAULT_PAGE_SIZE}; `400` otherwise).",
            ),
        ],
        responses={200: ExecutionPageSerializer, **errors(400, 401, 403)},
        tags=["executions"],
    )
    def get(self, request: Request) -> Response:
        filters = list_filters(request)
        queryset = (
            Execution.objects.none() if filters is None else Execution.objects.filter(**filters)
        )
        hooked = any_execution_hook()
        if not hooked:  # a hook may read any column (the input, say)
            queryset = queryset.only(
                "id", "workflow_id", "status", "created_at", "updated_at", "finished_at"
            )
        paginator = ExecutionPagination()
        page = paginator.paginate_queryset(queryset, request, view=self) or []
        shown = [e for e in page if not hooked or execution_hook_allows(request, "list", e)]
        paginator.sealed = len(shown) < len(page)  # the links may name a hidden one
        results = [execution_summary(request, execution) for execution in shown]
        return Response(
            {
                "results": results,
                "next": paginator.get_next_link(),
                "previous": paginator.get_previous_link(),
            }
        )

    @operation(
        "execution_start",
        "Start a workflow",
        "Creates an execution and requests its first run. The arguments are "
        "bound against the workflow's signature first (`400` `invalid_arguments`). Exactly "
        "one start creates an `execution_id` (`201`); another with equal arguments returns "
        "it (`200`), with different ones is `409`. A user without `view_execution` gets "
        "the execution's summary (as the list shows it), not its input, result or steps, "
        "and only of an execution it started: a start naming another's is `409` with the "
        "same words whatever that execution is.",
        request=ExecutionStartSerializer,
        parameters=[IDEMPOTENCY_KEY],
        responses={
            201: PolymorphicProxySerializer(
                "ExecutionStarted",
                [ExecutionSerializer, ExecutionSummarySerializer],
                None,
            ),
            200: OpenApiResponse(
                PolymorphicProxySerializer(
                    "ExecutionFound",
                    [ExecutionSerializer, ExecutionSummarySerializer],
                    None,
                ),
                description="It existed already.",
            ),
            **errors(400, 401, 403, 409, 413, 415, 422, 500),
        },
        tags=["executions"],
    )
    def post(self, request: Request) -> Response:
        serializer = ExecutionStartSerializer(data=self.body(request))
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        try:
            workflow = get_workflow(data["workflow"])
        except LookupError:
            name = data["workflow"]
            raise UnknownWorkflow(f"No workflow named {name!r} is registered.") from None
        check_arguments(workflow, data["args"], data["kwargs"])
        arguments = {"args": data["args"], "kwargs": data["kwargs"]}
        if not start_hook_allows(request, workflow, arguments):
            raise PermissionDenied("You may not start this workflow with these arguments.")
        execution_id: str | None = data.get("execution_id")
        key = idempotency.read_key(request)
        claim: idempotency.Claim | None = None
        if key is not None:
            claim = idempotency.claim(
                request,
                key,
                method="POST",
                target="executions",
                fingerprint=idempotency.fingerprint("POST", "executions", dict(data)),
            )
            if execution_id is None:
                digest = hashlib.sha256(key.encode("ascii")).hexdigest()[:40]
                execution_id = f"{claim.record.principal}:{digest}"
        queue = None
        if "queue" in data:
            try:
                queue = get_queue(data["queue"])
            except LookupError:
                if claim is not None:
                    claim.release()
                raise UnknownQueue(f"No queue named {data['queue']!r} is defined.") from None
        try:
            if queue is not None:
                new_id, created = enqueue(
                    queue,
                    workflow,
                    data["args"],
                    data["kwargs"],
                    key=data.get("key"),
                    priority=data.get("priority", 0),
                    execution_id=execution_id,
                    started_by=http_principal(request.user.pk),
                )
            else:
                new_id, created = start_execution(
                    workflow,
                    data["args"],
                    data["kwargs"],
                    execution_id=execution_id,
                    started_by=http_principal(request.user.pk),
                )
        except (WorkflowValueError, ExecutionConflictError) as exc:
            if claim is not None:
                claim.release()
            if isinstance(exc, ExecutionConflictError):
                raise conflict(request, exc) from None
            raise
        execution = execution_or_404(new_id)
        may_view = may_execution(request, "view", execution)
        if not created and not may_view and not own_start(request, execution):
            # Someone else's: a start-only user learns nothing of it, not even that its
            # arguments are these.
            if claim is not None:
                claim.release()
            raise ExecutionConflict(ID_TAKEN)
        return Response(
            execution_body(execution) if may_view else execution_summary(request, execution),
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
            headers={"Location": detail_url(request, new_id)},
        )


def conflict(request: Request, exc: ExecutionConflictError) -> ExecutionConflict:
    """The ``409`` of a start that named an existing execution with another workflow or
    other arguments: what differs, to a user who may view the execution or started it;
    else the words of any taken id."""
    existing = Execution.objects.filter(pk=exc.execution_id).first()
    if existing is not None and (
        may_execution(request, "view", existing) or own_start(request, existing)
    ):
        return ExecutionConflict(f"{str(exc)[:1].upper()}{str(exc)[1:]}.")
    return ExecutionConflict(ID_TAKEN)


class ExecutionDetailView(YieldstarAPIView):
    """``GET executions/<id>/``: an execution with its steps."""

    permission_classes = [ExecutionPermission]

    def execution_action(self, request: Request) -> str:
        return "view"

    @operation(
        "execution_retrieve",
        "Read an execution",
        "Status, result or error, and the heap: every recorded step in replay order.",
        responses={200: ExecutionSerializer, **errors(401, 403, 404, 500)},
        tags=["executions"],
    )
    def get(self, request: Request, execution_id: str) -> Response:
        execution = execution_or_404(execution_id)
        refuse_unless(request, "view", execution)
        return Response(execution_body(execution))


class ExecutionCancelView(YieldstarAPIView):
    """``POST executions/<id>/cancel/``: cancel an unfinished execution (idempotent)."""

    permission_classes = [ExecutionPermission]
    body_methods = frozenset()

    def execution_action(self, request: Request) -> str:
        return "change"

    @operation(
        "execution_cancel",
        "Cancel an execution",
        "Stops the execution at its next step; recorded steps are not undone. "
        "Cancelling a cancelled execution is a no-op; a completed or failed one is `409`. "
        "The answer is the execution whole to a user who may view it, else its `id` and "
        "`status` alone.",
        request=None,
        responses={200: ExecutionCancelledSerializer, **errors(401, 403, 404, 409, 415, 500)},
        tags=["executions"],
    )
    def post(self, request: Request, execution_id: str) -> Response:
        execution = execution_or_404(execution_id)
        refuse_unless(request, "cancel", execution)
        cancelled = cancel_execution(execution.id)
        # Read again: a finished execution may be pruned (retention) meanwhile.
        execution = execution_or_404(execution.id)
        if not cancelled and execution.status != ExecutionStatus.CANCELLED:
            raise ExecutionConflict(f"The execution already finished ({execution.status}).")
        if may_execution(request, "view", execution):
            return Response(execution_body(execution))
        return Response({"id": execution.id, "status": execution.status})


class ExecutionRetryView(YieldstarAPIView):
    """``POST executions/<id>/retry/``: run a failed or cancelled execution again."""

    permission_classes = [ExecutionPermission]
    body_methods = frozenset()

    def execution_action(self, request: Request) -> str:
        return "retry"

    @operation(
        "execution_retry",
        "Retry an execution",
        "Runs a failed or cancelled execution again from the step that failed (or that it "
        "was waiting on), keeping every recorded step. Needs `retry_execution` and the "
        "workflow's hook allowing `retry`. Any other status is `409`, and so is the "
        "second of two retries racing for one execution. The answer is the execution "
        "whole to a user who may view it, else its `id` and `status` alone.",
        request=None,
        responses={200: ExecutionCancelledSerializer, **errors(401, 403, 404, 409, 415, 500)},
        tags=["executions"],
    )
    def post(self, request: Request, execution_id: str) -> Response:
        execution = execution_or_404(execution_id)
        refuse_unless(request, "retry", execution)
        try:
            retried = retry_execution(execution.id)
        except Execution.DoesNotExist:
            raise NotFound("There is no such execution.") from None
        except ExecutionStateError as exc:
            raise ExecutionConflict(str(exc)) from None
        if not retried:
            raise ExecutionConflict("Another retry of this execution was made meanwhile.")
        execution = execution_or_404(execution.id)
        if may_execution(request, "view", execution):
            return Response(execution_body(execution))
        return Response({"id": execution.id, "status": execution.status})


class ExecutionForkView(YieldstarAPIView):
    """``POST executions/<id>/fork/``: a new execution from the first steps of this one."""

    permission_classes = [ExecutionPermission]

    def execution_action(self, request: Request) -> str:
        return "fork"

    @operation(
        "execution_fork",
        "Fork an execution",
        "Starts a new execution of the same workflow and arguments whose heap is a copy "
        "of this one's first `from_step` recorded steps (completed or failed heap "
        "entries, in replay order); it runs every later step itself. Needs "
        "`fork_execution` and the workflow's hook allowing `fork` on this execution. "
        "`from_step` past the recorded steps is `400` `invalid_fork_point`. With an "
        "`execution_id` the fork is idempotent (`200` for the same fork again, `409` for "
        "an id taken otherwise). The answer is the new execution whole to a user who may "
        "view it, else its summary.",
        request=ExecutionForkSerializer,
        responses={
            201: PolymorphicProxySerializer(
                "ExecutionForked", [ExecutionSerializer, ExecutionSummarySerializer], None
            ),
            200: OpenApiResponse(
                PolymorphicProxySerializer(
                    "ExecutionForkFound", [ExecutionSerializer, ExecutionSummarySerializer], None
                ),
                description="The same fork existed already.",
            ),
            **errors(400, 401, 403, 404, 409, 413, 415, 500),
        },
        tags=["executions"],
    )
    def post(self, request: Request, execution_id: str) -> Response:
        source = execution_or_404(execution_id)
        refuse_unless(request, "fork", source)
        serializer = ExecutionForkSerializer(data=self.body(request))
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        wanted: str | None = data.get("execution_id")
        existed = wanted is not None and Execution.objects.filter(pk=wanted).exists()
        try:
            new_id = fork_execution(source.id, from_step=data["from_step"], execution_id=wanted)
        except Execution.DoesNotExist:
            raise NotFound("There is no such execution.") from None
        except ForkPointError as exc:
            raise InvalidForkPoint(str(exc)) from None
        except ValueError as exc:
            existing = Execution.objects.filter(pk=wanted).first()
            if existing is None or not may_execution(request, "view", existing):
                raise ExecutionConflict(ID_TAKEN) from None
            raise ExecutionConflict(str(exc)) from None
        execution = execution_or_404(new_id)
        may_view = may_execution(request, "view", execution)
        return Response(
            execution_body(execution) if may_view else execution_summary(request, execution),
            status=status.HTTP_200_OK if existed else status.HTTP_201_CREATED,
            headers={"Location": detail_url(request, new_id)},
        )


__all__ = [
    "ExecutionCancelView",
    "ExecutionDetailView",
    "ExecutionForkView",
    "ExecutionRetryView",
    "ExecutionStartView",
]
