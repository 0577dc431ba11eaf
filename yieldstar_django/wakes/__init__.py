"""Durable wakes: the outbox of wake intents (:mod:`.outbox`), the wake backends
(:mod:`.backends`), their delivery after a commit (:mod:`.delivery`) and the relay
(:mod:`.relay`, :mod:`.relay_log`).

- **Immediate wakes** (a mutation woke a waiter, a stale waiter registered, ``wake_now``) are
  written as intents in the committing transaction and handed to the ``WAKE_BACKEND`` by
  ``transaction.on_commit``; nothing more is written on the committing path. A failure
  there is logged and never raised into the committed write. A store commit made outside
  ``transaction.atomic`` publishes them while PostgreSQL commits it
  instead, if the backend is marked ``enqueues_only`` (the Celery one is) and
  ``PUBLISH_DURING_COMMIT`` is on (:mod:`yieldstar_django.connector.overlap`).
- **Durable timers** (``schedule_wake``) are intents due at a time.
- **The relay** delivers every intent not yet acknowledged once its ``available_at`` has
  passed, and pushes it back by a growing delay.
- **Acknowledgement**: an intent is done when the wake took effect (a run of the execution
  started after it was due, or the execution finished), not when a broker accepted it.

The package imports without the app registry (it writes its table with the statements of
``sql/queries.sql``), so the connector and ``WAKE_BACKEND`` paths can import it at any
time. See ``docs/internals/architecture.md#wakes`` for the life of a wake.
"""

from __future__ import annotations

from .backends import RESUME_TASK, celery_backend, enqueues_only, is_enqueue_only
from .delivery import (
    OnCommitDelivery,
    deliver_on_commit,
    deliver_wakes,
    hand_over,
    publish_during_commit,
    wake_now,
)
from .outbox import (
    PendingWake,
    acknowledge,
    prune_delivered,
    schedule_wake,
    write_intents,
)
from .relay import relay_once, run_relay, stop_on_signals

__all__ = [
    "RESUME_TASK",
    "OnCommitDelivery",
    "PendingWake",
    "acknowledge",
    "celery_backend",
    "deliver_on_commit",
    "deliver_wakes",
    "enqueues_only",
    "hand_over",
    "is_enqueue_only",
    "prune_delivered",
    "publish_during_commit",
    "relay_once",
    "run_relay",
    "schedule_wake",
    "stop_on_signals",
    "wake_now",
    "write_intents",
]
