"""The runtime's calls into the wake outbox (:mod:`yieldstar_django.wakes`).

Every wake the runtime asks for is a durable wake intent written in the caller's
transaction: ``request_run`` for "run it once this commits", ``schedule_timer`` for "run it
at ``at``" (sleeps, retries, lease expiry). The relay delivers due intents, so a crash
after a commit never loses one.
"""

from __future__ import annotations

from datetime import datetime

from django.db import router

__all__ = ["cancel_timer", "request_run", "schedule_timer"]


def _alias() -> str:
    from ..models.stores import WakeIntent

    return router.db_for_write(WakeIntent)


def request_run(execution_id: str, workflow_id: str, *, reason: str) -> int:
    """Durably request a run of the execution once the current transaction commits."""
    from ..wakes import wake_now

    return wake_now(execution_id, workflow_id, reason=reason, using=_alias())


def schedule_timer(execution_id: str, workflow_id: str, at: datetime, *, reason: str) -> int:
    """Durably request a run of the execution at ``at``; returns the intent id."""
    from ..wakes import schedule_wake

    return schedule_wake(execution_id, workflow_id, at, reason=reason, using=_alias())


def cancel_timer(intent_id: int) -> None:
    """Forget a timer that is no longer needed, unless it was already delivered.

    A timer that fires anyway (deleted too late) is a spurious wake, which is harmless.
    """
    from ..models.stores import WakeIntent

    WakeIntent.objects.filter(pk=intent_id, delivered_at__isnull=True).delete()
