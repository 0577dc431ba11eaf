"""Celery tasks of yieldstar_django.

``yieldstar_django.resume_execution(execution_id)`` is what every wake enqueues (the default
``WAKE_BACKEND``); ``yieldstar_django.relay_wakes`` is the relay
(:mod:`yieldstar_django.wakes.relay`) as a Celery beat task;
``yieldstar_django.prune_executions`` is the retention beat task. Resuming is idempotent
and safe to deliver twice or late: the execution's lease serializes runs, and a wake that
arrives during a run makes that run go again. Each call closes stale database connections
before and after it runs, as Django does around a request (Celery workers get no request
signals), but never one inside a ``transaction.atomic`` block: a task run eagerly
(``task_always_eager``, ``.apply()``) in a transaction of its caller's (a ``TestCase``'s,
a view's under ``ATOMIC_REQUESTS``) leaves that transaction alone.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from celery import shared_task
from celery.exceptions import Retry
from django.db import DatabaseError, InterfaceError, OperationalError, connections

from .conf import database_alias, yieldstar_settings
from .connector import cursors
from .observability import metrics, tracing
from .retention import prune_finished
from .runtime.executions import run_execution
from .sql import queries
from .sql.queries import placeholders
from .wakes.backends import resend_group
from .wakes.relay import relay_once, run_round_tasks

logger = logging.getLogger("yieldstar_django.tasks")

__all__ = ["prune_executions", "relay_wakes", "resume_execution", "resume_executions"]

#: Longest Celery countdown between two retries after a database error, in seconds.
MAX_RETRY_COUNTDOWN = 30


def _close_stale_connections() -> None:
    """Django's ``close_old_connections`` (what it runs around a request), except for a
    connection inside a ``transaction.atomic`` block.

    In a worker no task runs inside one. A task run eagerly (``task_always_eager``,
    ``.apply()``) runs in its caller's thread, inside the caller's transaction when there
    is one (a ``TestCase``'s, a view's under ``ATOMIC_REQUESTS``): closing that connection
    would end the transaction, lose what it wrote and refuse every later query in the
    block. Celery's own Django fixup leaves an eager task's connections alone so.
    """
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close_if_unusable_or_obsolete()


@shared_task(
    bind=True,
    name="yieldstar_django.resume_execution",
    acks_late=True,
    ignore_result=True,
    max_retries=8,
)
def resume_execution(self: Any, execution_id: str) -> str:
    """Run the execution until it finishes or suspends; return what happened.

    A database error on a connection kept from an earlier task that turns out broken
    (closed by the server or a proxy while the worker was idle, or cut during the run)
    runs the execution again at once on a new connection, so workers need no
    ``CONN_HEALTH_CHECKS`` (a ``SELECT 1`` before every task). Any other database error,
    or one on a new connection (the database restarting, say), retries the task with a
    short backoff; beyond that the execution's durable timers resume it.
    """
    _close_stale_connections()
    if tracing.enabled() or metrics.enabled():
        return _observed_resume(self, execution_id)
    return _resume(self, execution_id)


@shared_task(
    bind=True,
    name="yieldstar_django.resume_executions",
    acks_late=True,
    ignore_result=True,
    max_retries=8,
)
def resume_executions(self: Any, execution_ids: list[str]) -> list[str]:
    """``resume_execution`` of each of ``execution_ids`` in turn: one message of a group of
    ordinary wakes (``wakes.backends.groups``: a fan-out's children); what happened to each.

    A database error retries the group from the execution it hit on, as
    ``resume_execution`` retries; another error of one is logged and the next goes on.
    Once the group has held its pool process for ``RUN_SLICE_SECONDS``, the executions left
    are sent on as a new message (a takeover waits for no group to end), and any not
    resumed are still due by their durable wake intents.
    """
    results: list[str] = []
    slice_seconds = yieldstar_settings.RUN_SLICE_SECONDS
    started = time.monotonic()
    contexts: dict[str, str] | None = None
    if tracing.enabled() and not _header(self.request, tracing.TRACEPARENT):
        # Woken with no trace context: each continues its start's, read for all at once.
        contexts = _start_contexts(execution_ids)
    for index, execution_id in enumerate(execution_ids):
        rest = list(execution_ids[index:])
        if index and slice_seconds is not None and time.monotonic() - started >= slice_seconds:
            try:
                resend_group(rest)
            except Exception:  # the relay delivers their intents again
                logger.warning("could not send on the rest of a group of resumes", exc_info=True)
            break
        _close_stale_connections()
        try:
            if tracing.enabled() or metrics.enabled():
                start = None if contexts is None else contexts.get(execution_id, "")
                results.append(_observed_resume(self, execution_id, rest, start))
            else:
                results.append(_resume(self, execution_id, rest))
        except Retry:
            raise
        except Exception:
            logger.exception("resume of %s failed", execution_id)
            results.append("error")
    return results


def _observed_resume(
    task: Any, execution_id: str, rest: list[str] | None = None, start: str | None = None
) -> str:
    """``_resume`` in a ``yieldstar.resume`` span continuing the trace of the wake (its
    message's ``traceparent``), else of the execution's start (``start`` if read already);
    the time the commit woke it kept for ``yieldstar_wake_latency_seconds``."""
    request = task.request
    woken = _header(request, metrics.WOKEN_AT_HEADER)
    token = metrics.woken_at.set(float(woken) if isinstance(woken, int | float) else None)
    try:
        if not tracing.enabled():
            return _resume(task, execution_id, rest)
        parent = _header(request, tracing.TRACEPARENT)
        if not isinstance(parent, str) or not parent:
            parent = _start_context(execution_id) if start is None else start
        attributes = {"yieldstar.execution.id": execution_id, "celery.task_id": str(request.id)}
        with tracing.span(
            "yieldstar.resume", attributes, parent=parent, kind="consumer", quiet=(Retry,)
        ) as span:
            result = _resume(task, execution_id, rest)
            span.set("yieldstar.resume.result", result)
            return result
    finally:
        metrics.woken_at.reset(token)


def _header(request: Any, name: str) -> object:
    """A message header of the task's: a worker's request has them as its own keys, an
    eager ``apply(headers=...)`` under ``headers``."""
    value = request.get(name)
    if value is None:
        headers = request.get("headers")
        if isinstance(headers, dict):
            value = headers.get(name)
    return value


def _start_context(execution_id: str) -> str:
    """The trace context stored with the execution's start (``""`` if none, or gone)."""
    connection = connections[database_alias()]
    try:
        # One statement of the hot path, not a query the ORM builds per resume.
        found = cursors.fetchone(
            connection, queries.of(connection).execution_trace_context, [execution_id]
        )
    except (DatabaseError, ValueError):  # an id no row can have: the run says GONE
        return ""
    return str(found[0]) if found and found[0] else ""


def _start_contexts(execution_ids: list[str]) -> dict[str, str] | None:
    """:func:`_start_context` of each of ``execution_ids`` (a group's) in one statement;
    ``None`` if they cannot be read so (each is then read alone)."""
    connection = connections[database_alias()]
    statement = queries.of(connection).execution_trace_contexts
    try:
        with connection.cursor() as cursor:
            cursor.execute(statement.format(ids=placeholders(len(execution_ids))), execution_ids)
            return {str(id): str(context or "") for id, context in cursor.fetchall()}
    except (DatabaseError, ValueError):
        return None


def _resume(self: Any, execution_id: str, rest: list[str] | None = None) -> str:
    """Run the execution (again at once on a new connection if the kept one turned out
    broken); retry the task on another database error: the group ``rest`` (this
    execution and those after it), if any, else this one."""
    kept = connections[database_alias()].connection
    try:
        try:
            return str(run_execution(execution_id))
        except (OperationalError, InterfaceError):
            if not (kept is not None and _dropped_broken_connection(kept)):
                raise
            logger.info("resume of %s found its connection broken; reconnecting", execution_id)
            return str(run_execution(execution_id))
    except (OperationalError, InterfaceError) as exc:
        countdown = min(MAX_RETRY_COUNTDOWN, 2 ** int(self.request.retries))
        logger.warning(
            "resume of %s hit a database error; retrying in %ss", execution_id, countdown
        )
        args = None if rest is None else [rest]
        raise self.retry(args=args, exc=exc, countdown=countdown) from exc
    finally:
        _close_stale_connections()


def _dropped_broken_connection(kept: object) -> bool:
    """After a database error: whether the connection of ``DATABASE_ALIAS`` kept from an
    earlier task (``kept``) turned out broken: replaced during the run (a run that fails
    lets its lease go on a new connection if its own is broken), or dropped by Django
    (closed already when a rollback failed, or closed now by
    ``close_if_unusable_or_obsolete``, which tests a connection that saw an error)."""
    connection = connections[database_alias()]
    if connection.connection is not kept:
        return True
    connection.close_if_unusable_or_obsolete()
    return connection.connection is None


@shared_task(name="yieldstar_django.prune_executions", ignore_result=True)
def prune_executions(batch_size: int = 500) -> int:
    """The retention beat task: delete executions finished more than ``RETENTION_SECONDS``
    ago, with their heaps, wake intents and ledger rows, and delivered intents as old, in
    batches of ``batch_size``. Returns the executions deleted (0 when the setting is None)."""
    age = yieldstar_settings.RETENTION_SECONDS
    if age is None:
        return 0
    _close_stale_connections()
    try:
        return prune_finished(older_than=age, batch_size=batch_size).executions
    finally:
        _close_stale_connections()


@shared_task(name="yieldstar_django.relay_wakes", ignore_result=True)
def relay_wakes(using: str | None = None) -> int:
    """Celery beat task: one relay round (schedule it every ``RELAY_INTERVAL`` or so).

    Closes stale database connections before and after, as Django does around a request.
    """
    using = database_alias(using)
    _close_stale_connections()
    try:
        delivered = relay_once(using=using)
        run_round_tasks(using)
        return delivered
    finally:
        _close_stale_connections()
