"""Wake backends: what ``WAKE_BACKEND`` names, a callable ``deliver(wakes)`` that hands
every wake to something that will resume its execution, returns once they are handed over
and raises otherwise (the relay retries what was not delivered).

A backend marked :func:`enqueues_only` may be called while the commit that wrote the wakes
is being acknowledged (see ``PUBLISH_DURING_COMMIT``); any other is called once it is. The
Celery backend counts as one only while no receiver is connected to Celery's publish
signals for its task: a project's receiver may query the database, on the connection whose
commit is not answered yet (it would wait for that connection's lock forever)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar

from celery import signals

from ..celery_app import broker_kind, require_configured_app
from ..core.results import Wake
from ..observability import metrics, tracing
from .guard import refuse_in_tests

__all__ = [
    "GROUP_FROM",
    "GROUP_SIZE",
    "PRIORITIES",
    "RESUME_GROUP_TASK",
    "RESUME_TASK",
    "celery_backend",
    "enqueues_only",
    "groups",
    "is_enqueue_only",
    "publish_receivers",
    "resend_group",
]

B = TypeVar("B", bound=Callable[..., Any])

#: The Celery task a wake enqueues (implemented in :mod:`yieldstar_django.tasks`).
RESUME_TASK: Final = "yieldstar_django.resume_execution"
#: The Celery task one message of a group of ordinary wakes enqueues: it resumes the
#: executions in turn (:mod:`yieldstar_django.tasks`).
RESUME_GROUP_TASK: Final = "yieldstar_django.resume_executions"
#: Ordinary wakes handed over together beyond this many are sent in groups (a fan-out's
#: children): still at least this many messages, for as many pool processes.
GROUP_FROM: Final = 64
#: The most executions one message of a group resumes.
GROUP_SIZE: Final = 16


def enqueues_only(backend: B) -> B:
    """Mark a wake backend that only enqueues messages for other processes: it never uses
    this process's database connections, and nothing it calls does (Celery's publish
    signals included). Its wakes may then be published while their commit is acknowledged,
    which takes the commit's flush off a wake's path."""
    backend.enqueues_only = True  # type: ignore[attr-defined]
    return backend


def is_enqueue_only(backend: object) -> bool:
    """Whether ``backend`` is marked :func:`enqueues_only` (for the Celery backend: and no
    receiver is connected to Celery's publish signals, see :func:`publish_receivers`)."""
    if getattr(backend, "enqueues_only", False) is not True:
        return False
    return not (backend is celery_backend and publish_receivers())


def publish_receivers() -> bool:
    """Whether a receiver is connected to ``before_task_publish`` or ``after_task_publish``
    (or the old ``task_sent``) for ``resume_execution``: code of the project or of a
    library that runs in the publishing thread and may use its database connections."""
    return any(
        signal.has_listeners(task)
        for task in (RESUME_TASK, RESUME_GROUP_TASK)
        for signal in (signals.before_task_publish, signals.after_task_publish, signals.task_sent)
    )


@enqueues_only
def celery_backend(wakes: Sequence[Wake]) -> None:
    """The default ``WAKE_BACKEND``: enqueue ``resume_execution(execution_id)`` per wake;
    more than ``GROUP_FROM`` ordinary wakes at once (a fan-out's children) go in
    ``resume_executions(execution_ids)`` messages of up to ``GROUP_SIZE`` each
    (:func:`groups`), which spares the broker and the worker's consumer a message per
    execution.

    A lease's takeover (``Wake.takeover``) is sent with the highest priority, ordinary
    wakes below it (``PRIORITIES``). Sent with ``ignore_result``: nothing waits for a
    resume's result, and a send that expects one makes a Redis result backend subscribe
    this process to the task's result channel (a round trip per wake, and a subscription
    never released).

    Uses the current Celery app (the one the project configures). Raises when the broker
    refuses a message, or when that app is Celery's unconfigured default
    (``UnconfiguredCeleryApp``); the relay then retries the wakes not acknowledged.
    While Django's test environment is set up it refuses to publish
    (``BrokerInTestsError``) unless ``PUBLISH_IN_TESTS`` is set.
    """
    app = require_configured_app()
    refuse_in_tests(app)
    urgent, ordinary = PRIORITIES.get(broker_kind(app), (None, None))
    headers = wake_headers()
    # One producer (one broker connection from the pool) for all of them.
    with app.producer_or_acquire() as producer:
        for group in groups(wakes):
            if len(group) == 1:
                app.send_task(
                    RESUME_TASK,
                    args=[group[0].execution_id],
                    ignore_result=True,
                    priority=urgent if group[0].takeover else ordinary,
                    headers=headers,
                    producer=producer,
                )
            else:
                app.send_task(
                    RESUME_GROUP_TASK,
                    args=[[wake.execution_id for wake in group]],
                    ignore_result=True,
                    priority=ordinary,
                    headers=headers,
                    producer=producer,
                )


def resend_group(execution_ids: Sequence[str]) -> None:
    """Send ``resume_executions(execution_ids)`` as :func:`celery_backend` sends a group:
    the rest of a group whose message gave its pool process back."""
    app = require_configured_app()
    refuse_in_tests(app)
    app.send_task(
        RESUME_GROUP_TASK,
        args=[list(execution_ids)],
        ignore_result=True,
        priority=PRIORITIES.get(broker_kind(app), (None, None))[1],
        headers=wake_headers(),
    )


def groups(wakes: Sequence[Wake]) -> list[list[Wake]]:
    """``wakes`` as the messages of the Celery backend, in order: a takeover alone (it
    goes first, by priority); the ordinary ones alone too while they are at most
    ``GROUP_FROM``, else in groups of ``ceil(n / GROUP_FROM)`` (at most ``GROUP_SIZE``), so
    that they still make at least about ``GROUP_FROM`` messages for the pool processes."""
    ordinary = [wake for wake in wakes if not wake.takeover]
    messages = [[wake] for wake in wakes if wake.takeover]
    size = 1 if len(ordinary) <= GROUP_FROM else min(GROUP_SIZE, -(-len(ordinary) // GROUP_FROM))
    messages += [ordinary[start : start + size] for start in range(0, len(ordinary), size)]
    return messages


def wake_headers() -> dict[str, object] | None:
    """The headers of a resume message: the W3C ``traceparent`` of the wake (tracing on),
    and the time a commit published it (``yieldstar_woken_at``, metrics on); ``None``
    when there is neither."""
    headers: dict[str, object] = {}
    traceparent = tracing.current_traceparent()
    if traceparent:
        headers[tracing.TRACEPARENT] = traceparent
    headers.update(metrics.wake_headers())
    return headers or None


#: The message priorities of the Celery backend by broker (``celery_app.broker_kind``):
#: (takeover, ordinary wake). A lease's takeover goes before the ordinary wakes waiting in
#: the same queue, so a rescued execution waits for the next free pool process, not for the
#: backlog. On Redis a lower number comes first (kombu keeps one list per priority step,
#: ``0, 3, 6, 9`` by default, and a worker pops them in that order): a takeover goes to the
#: queue's first list, ordinary wakes to the next one. On RabbitMQ a higher number comes
#: first, on a queue declared with ``x-max-priority`` (Celery's
#: ``task_queue_max_priority``; ``manage.py check`` reports ``yieldstar.W006`` without it).
#: Other transports get no priority.
PRIORITIES: Final[dict[str, tuple[int | None, int | None]]] = {
    "redis": (0, 3),
    "amqp": (9, None),
}
