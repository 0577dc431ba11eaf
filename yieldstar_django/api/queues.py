"""The queue views: ``GET queues/`` (each defined queue and what it holds),
``POST queues/<name>/pause/`` and ``POST queues/<name>/resume/``."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from ..runtime.queues import get_queue, queue_stats, registered_queues, set_paused
from .base import YieldstarAPIView
from .openapi import errors, operation
from .permissions import ExecutionPermission
from .serializers import QueueSerializer

__all__ = ["QueueListView", "QueuePauseView", "QueueResumeView"]


def _body(name: str) -> dict[str, Any]:
    return asdict(queue_stats(name))


class QueueListView(YieldstarAPIView):
    """``GET queues/``: every queue defined in this process, with what it holds now."""

    permission_classes = [ExecutionPermission]

    def execution_action(self, request: Request) -> str:
        return "view"

    @operation(
        "queue_list",
        "List the queues",
        "Each queue defined in this process (`define_queue`): its depth (`waiting`), "
        "`running`, `oldest_waiting`, rate use and whether it is `paused`. Needs the view "
        "permission on executions.",
        request=None,
        responses={200: QueueSerializer(many=True), **errors(401, 403, 500)},
        tags=["queues"],
    )
    def get(self, request: Request) -> Response:
        return Response([_body(queue.name) for queue in registered_queues()])


class QueuePauseView(YieldstarAPIView):
    """``POST queues/<name>/pause/`` or ``resume/``: admit nothing more, or again."""

    permission_classes = [ExecutionPermission]
    body_methods = frozenset()
    paused = True

    def execution_action(self, request: Request) -> str:
        return "change"

    @operation(
        "queue_pause",
        "Pause or resume a queue",
        "`pause/` admits nothing more (running executions go on; new starts wait, "
        "`queued`); `resume/` admits again, as many as the limits allow at once. Both are "
        "idempotent. Needs the change permission on executions.",
        request=None,
        responses={200: QueueSerializer, **errors(401, 403, 404, 415, 500)},
        tags=["queues"],
    )
    def post(self, request: Request, name: str) -> Response:
        try:
            queue = get_queue(name)
        except LookupError:
            raise NotFound(f"No queue named {name!r} is defined.") from None
        set_paused(queue.name, self.paused)
        return Response(_body(queue.name))


class QueueResumeView(QueuePauseView):
    """``POST queues/<name>/resume/``."""

    paused = False
