"""The relay: delivers every due, unacknowledged wake intent.

It runs as ``python manage.py yieldstar_relay`` (``run_relay``) or as the Celery beat task
``yieldstar_django.relay_wakes`` (:mod:`yieldstar_django.tasks`). An intent is due at its
``available_at``: ``RELAY_DELAY`` after the commit for an immediate wake that has not taken
effect by then (broker down, process killed after the commit, a worker killed with the
message prefetched), the due time for a durable timer. Each delivery pushes
``available_at`` back (``outbox.redelivery_delay``) when the relay claims the intent, before
it publishes, so an intent is delivered again only if no run acknowledged it meanwhile, and
no row stays locked while the broker is called. A batch the backend refuses ends the round
(the rest waits for the next one). Each round then runs the upkeep registered
with ``every_round`` (the runtime hands back expired leased claims; tables that outgrew
their planner statistics are analyzed).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

from django.db import connections

from ..conf import database_alias, yieldstar_settings
from . import relay_log
from .delivery import deliver_claimed
from .outbox import claim_due, require_batch_size

__all__ = ["every_round", "relay_once", "run_relay", "run_round_tasks", "stop_on_signals"]

logger = logging.getLogger("yieldstar_django.wakes")


def relay_once(
    *, using: str | None = None, batch_size: int = 100, stop: threading.Event | None = None
) -> int:
    """Deliver every due, unacknowledged wake intent; return how many were delivered.
    Once ``stop`` is set, return after the batch in progress instead (the rest stays due).
    ``ValueError`` for a ``batch_size`` that is not an integer from 1 to ``MAX_BATCH_SIZE``.

    Batch by batch: claim (``outbox.claim_due``: count the delivery and push the intents
    back, committed at once; on PostgreSQL ``FOR UPDATE SKIP LOCKED``, so several relays
    share the work and never deliver one batch together), then publish with no
    transaction open, so no row lock is held while the broker answers (``deliver_claimed``).
    A batch the backend refuses is recorded as failed and retried sooner, with backoff, and
    ends the round: the broker is likely down, and the rest of the backlog waits for the
    next round rather than costing a refusal (a publish timeout, with a hung broker) per
    batch. A relay that dies after its claim leaves the batch to be delivered again at the
    time the claim set. Call it outside a transaction (as the command and the beat task
    do): inside one, the claim's locks last until that transaction ends. It first records
    the relay's heartbeat (``relay_log.heartbeat``, at most every ``HEARTBEAT_EVERY``
    seconds), which ``yieldstar_health`` reads.
    """
    require_batch_size(batch_size)
    using = database_alias(using)
    relay_log.heartbeat.beat(using)
    delivered = 0
    while True:
        batch = claim_due(using, batch_size)
        if batch and not deliver_claimed(batch, using=using):
            return delivered
        if batch:
            delivered += len(batch)
            logger.debug("relay: delivered %d wake(s)", len(batch))
        if len(batch) < batch_size or (stop is not None and stop.is_set()):
            return delivered


#: Upkeep run once per relay round, after the deliveries, with the relay's database alias
#: (``AppConfig.ready`` registers the runtime's sweep of expired leased claims and
#: :func:`yieldstar_django.analyze.analyze_grown_tables`).
_round_tasks: list[Callable[[str], object]] = []


def every_round(task: Callable[[str], object]) -> None:
    """Run ``task(using)`` in every relay round (idempotent)."""
    if task not in _round_tasks:
        _round_tasks.append(task)


def run_round_tasks(using: str) -> None:
    """Run the registered upkeep of one relay round on ``using``."""
    for task in _round_tasks:
        task(using)


#: While rounds keep failing (no database: a restart, a failover), how often the relay
#: says so again, in seconds. Only the first failure of a streak is logged with its
#: traceback; the first round that succeeds after it says how long the streak lasted.
FAILING_REPORT_SECONDS = 10.0
_clock = time.monotonic


class _FailedRounds:
    """The relay's streak of failed rounds, and what it logs of it."""

    def __init__(self) -> None:
        self.count = 0
        self.since = 0.0
        self.reported = 0.0

    def failed(self, exc: BaseException) -> None:
        now = _clock()
        self.count += 1
        if self.count == 1:
            self.since = self.reported = now
            logger.exception("relay round failed")
        elif now - self.reported >= FAILING_REPORT_SECONDS:
            self.reported = now
            logger.warning(
                "relay rounds still failing: %d in a row over %.1fs; the last: %s",
                self.count,
                now - self.since,
                exc,
            )

    def succeeded(self) -> None:
        if self.count:
            logger.warning(
                "relay rounds succeed again after %d failed round(s) over %.1fs",
                self.count,
                _clock() - self.since,
            )
            self.count = 0


def run_relay(
    *,
    using: str | None = None,
    interval: float | None = None,
    stop: threading.Event | None = None,
    once: bool = False,
    on_error: Callable[[BaseException], None] | None = None,
) -> int:
    """Run ``relay_once`` every ``interval`` seconds (``RELAY_INTERVAL``) until ``stop`` is
    set; return the number of intents delivered. Once ``stop`` is set (a signal, see
    :func:`stop_on_signals`), return after the batch in progress, without the round's
    upkeep; what is left stays due for the next relay. Logs its database and Celery app at
    the start and the counts once a minute (:mod:`.relay_log`).

    A database error in one round is logged (and passed to ``on_error``), the connection
    closed, and the loop goes on; the next round reconnects. A streak of failed rounds (no
    primary during a failover, say) logs its first failure with the traceback, a line
    every ``FAILING_REPORT_SECONDS`` while it lasts, and a line when a round succeeds again.
    """
    using = database_alias(using)
    stop = stop or threading.Event()
    total = 0
    relay_log.log_startup(using)
    relay_log.counts.using = using
    failed_rounds = _FailedRounds()
    while True:
        try:
            delivered = relay_once(using=using, stop=stop)
            total += delivered
            relay_log.counts.add(delivered=delivered)
            relay_log.counts.maybe_report()
            if not stop.is_set():
                run_round_tasks(using)
            failed_rounds.succeeded()
        except Exception as exc:
            failed_rounds.failed(exc)
            if on_error is not None:
                on_error(exc)
            connections[using].close()
        if once:
            return total
        wait = yieldstar_settings.RELAY_INTERVAL if interval is None else interval
        if stop.wait(wait):
            return total


def stop_on_signals(stop: threading.Event) -> None:
    """Set ``stop`` on SIGINT and SIGTERM (in the main thread): :func:`run_relay` then
    returns after the batch it is publishing."""

    def handler(signum: int, frame: FrameType | None) -> None:
        logger.info("relay: received signal %d, stopping", signum)
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
