"""The runtime's calls into the wake outbox (:mod:`yieldstar_django.wakes`).

Every wake the runtime asks for is a durable wake intent written in the caller's
transaction: ``request_run`` for "run it once this commits", ``schedule_timer`` for "run it
at ``at``" (sleeps, retries, lease expiry), ``ensure_timer`` for "... unless such a timer
is pending". The relay delivers due intents, so a crash
after a commit never loses one.
"""

from __future__ import annotations

from datetime import datetime

from ..conf import yieldstar_settings
from ..core.results import Wake
from ..models.stores import WakeIntent
from ..wakes.delivery import deliver_on_commit
from ..wakes.outbox import ensure_wake, schedule_wake, write_intents

__all__ = [
    "cancel_timer",
    "ensure_timer",
    "rearm_timer",
    "request_run",
    "request_runs",
    "schedule_timer",
]


def _alias() -> str:
    return yieldstar_settings.DATABASE_ALIAS


def request_run(execution_id: str, workflow_id: str, *, reason: str) -> int:
    """Durably request a run of the execution once the current transaction commits.

    ``wakes.wake_now`` without its savepoint: the intent is written in the caller's
    transaction (or at once in autocommit mode) and handed over on commit.
    """
    alias = _alias()
    pending = write_intents([Wake(execution_id, workflow_id)], reason=reason, using=alias)
    deliver_on_commit(pending, using=alias)
    return pending[0].intent_id


def request_runs(wakes: list[Wake], *, reason: str) -> None:
    """``request_run`` of each of ``wakes``, handed over together on commit."""
    if not wakes:
        return
    alias = _alias()
    deliver_on_commit(write_intents(wakes, reason=reason, using=alias), using=alias)


def schedule_timer(execution_id: str, workflow_id: str, at: datetime, *, reason: str) -> int:
    """Durably request a run of the execution at ``at``; returns the intent id."""
    return schedule_wake(execution_id, workflow_id, at, reason=reason, using=_alias())


def ensure_timer(execution_id: str, workflow_id: str, at: datetime, *, reason: str) -> None:
    """``schedule_timer``, unless an unacknowledged timer of ``reason`` is due at ``at``
    already (a run that waits again after a wake that was not its timer)."""
    ensure_wake(execution_id, workflow_id, at, reason=reason, using=_alias())


def rearm_timer(intent_id: int, at: datetime) -> None:
    """Move a timer to ``at`` as a new, unacknowledged intent (``rearm_timer`` of
    ``sql/queries.sql`` in one statement on PostgreSQL)."""
    WakeIntent.objects.filter(pk=intent_id).update(
        available_at=at, due_at=at, delivered_at=None, attempts=0
    )


def cancel_timer(intent_id: int) -> None:
    """Forget a timer that is no longer needed, unless it was already delivered.

    A timer that fires anyway (deleted too late) is a spurious wake, which is harmless.
    """
    WakeIntent.objects.filter(pk=intent_id, delivered_at__isnull=True).delete()
