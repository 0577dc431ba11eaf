"""The runtime's calls into the wake outbox (:mod:`yieldstar_django.wakes`).

Every wake the runtime asks for is a durable wake intent written in the caller's
transaction: ``request_run`` for "run it once this commits", ``schedule_timer`` for "run it
at ``at``" (sleeps, retries, lease expiry). The relay delivers due intents, so a crash
after a commit never loses one.
"""

from __future__ import annotations

from datetime import datetime

from django.db import router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field

__all__ = [
    "cancel_sql",
    "cancel_timer",
    "intent_insert",
    "rearm_sql",
    "rearm_timer",
    "request_run",
    "schedule_timer",
]


def _alias() -> str:
    from ..models.stores import WakeIntent

    return router.db_for_write(WakeIntent)


def request_run(execution_id: str, workflow_id: str, *, reason: str) -> int:
    """Durably request a run of the execution once the current transaction commits.

    ``wakes.wake_now`` without its savepoint: the intent is written in the caller's
    transaction (or at once in autocommit mode) and handed over on commit.
    """
    from ..core.results import Wake
    from ..wakes import deliver_on_commit, write_intents

    alias = _alias()
    pending = write_intents([Wake(execution_id, workflow_id)], reason=reason, using=alias)
    deliver_on_commit(pending, using=alias)
    return pending[0].intent_id


def schedule_timer(execution_id: str, workflow_id: str, at: datetime, *, reason: str) -> int:
    """Durably request a run of the execution at ``at``; returns the intent id."""
    from ..wakes import schedule_wake

    return schedule_wake(execution_id, workflow_id, at, reason=reason, using=_alias())


def rearm_timer(intent_id: int, at: datetime) -> None:
    """Move a timer to ``at`` as a new, unacknowledged intent (``rearm_sql``)."""
    from ..models.stores import WakeIntent

    WakeIntent.objects.filter(pk=intent_id).update(
        available_at=at, due_at=at, delivered_at=None, attempts=0
    )


def cancel_timer(intent_id: int) -> None:
    """Forget a timer that is no longer needed, unless it was already delivered.

    A timer that fires anyway (deleted too late) is a spurious wake, which is harmless.
    """
    from ..models.stores import WakeIntent

    WakeIntent.objects.filter(pk=intent_id, delivered_at__isnull=True).delete()


def intent_insert(
    connection: BaseDatabaseWrapper,
    *,
    execution_column: str = "id",
    workflow_column: str = "workflow_id",
) -> str:
    """``INSERT INTO <wake intents> (...) SELECT <execution id>, <workflow id>, %s, %s, ...``
    to follow with ``FROM <a relation>``: one pending wake intent per row of the relation,
    a timer written in the statement that needs it (the PostgreSQL fast paths of the
    leases). Its parameters are the reason, ``available_at``, ``due_at`` (the same time)
    and ``created_at`` (adapted for the connection). Mirrors ``wakes.schedule_wake``."""
    from ..models.stores import WakeIntent

    quote = connection.ops.quote_name
    meta = WakeIntent._meta

    def column(name: str) -> str:
        field = meta.get_field(name)
        assert isinstance(field, Field) and field.column is not None
        return quote(field.column)

    columns = ", ".join(
        column(name)
        for name in (
            "execution_id", "workflow_id", "reason", "available_at", "due_at",
            "delivered_at", "attempts", "last_error", "created_at",
        )
    )  # fmt: skip
    return (
        f"INSERT INTO {quote(meta.db_table)} ({columns}) "
        f"SELECT {quote(execution_column)}, {quote(workflow_column)}, %s, %s, %s, NULL, 0, '', %s"
    )


def rearm_sql(connection: BaseDatabaseWrapper) -> str:
    """``UPDATE`` of one timer (the last ``%s``) to fire at the first two ``%s``
    (``available_at``, ``due_at``) as a new, unacknowledged intent, to append conditions
    to: a renewed lease moves its takeover timer."""
    from ..models.stores import WakeIntent

    quote = connection.ops.quote_name
    return (
        f"UPDATE {quote(WakeIntent._meta.db_table)} SET {quote('available_at')} = %s, "
        f"{quote('due_at')} = %s, {quote('delivered_at')} = NULL, {quote('attempts')} = 0 "
        f"WHERE {quote('id')} = %s"
    )


def cancel_sql(connection: BaseDatabaseWrapper) -> str:
    """``DELETE`` of one undelivered intent by id (``%s``), to append conditions to."""
    from ..models.stores import WakeIntent

    quote = connection.ops.quote_name
    return (
        f"DELETE FROM {quote(WakeIntent._meta.db_table)} WHERE {quote('id')} = %s "
        f"AND {quote('delivered_at')} IS NULL"
    )
