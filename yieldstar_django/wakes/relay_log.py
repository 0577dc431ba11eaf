"""What the relay says about itself: one INFO line at startup (database alias, Celery app,
broker URL with the password masked) and, at most once a minute, a one-line count of the
wake intents delivered and failed since the last line (and how many seconds ago that was)
and those overdue now (undelivered, deliverable for more than a minute); and, at most every
:data:`HEARTBEAT_EVERY` seconds, a heartbeat row (``RelayHeartbeat``) that the health check
reads to tell whether a relay runs at all."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from datetime import timedelta

from django.db import DatabaseError, transaction
from django.utils import timezone

from ..celery_app import HINT, current_app, describe_app, is_default_app
from ..conf import database_alias, yieldstar_settings
from ..models.relay import RelayHeartbeat
from .backends import celery_backend
from .outbox import count_overdue

logger = logging.getLogger("yieldstar_django.relay")

#: Seconds between two count lines.
REPORT_EVERY = 60.0
#: Seconds between two heartbeats of one relay process (``HEALTH_RELAY_SECONDS`` must
#: exceed it).
HEARTBEAT_EVERY = 10.0
#: Heartbeats of processes not seen for this long are deleted.
HEARTBEAT_FORGET = timedelta(days=1)


def log_startup(using: str) -> None:
    """Log where the relay delivers from and to; warn loudly if the Celery wake backend
    would publish with Celery's unconfigured default app (its deliveries are refused)."""
    backend = yieldstar_settings.get("WAKE_BACKEND")
    app = current_app()
    logger.info(
        "relay: database %r, wake backend %s, Celery app %s",
        using,
        backend if isinstance(backend, str) else repr(backend),
        describe_app(app),
    )
    if is_default_app(app) and yieldstar_settings.wake_backend is celery_backend:
        logger.error(
            "relay: Celery's current app is its unconfigured default app; every delivery "
            "will be refused and retried until the project's app is imported. %s",
            HINT,
        )


class RelayCounts:
    """Counts of one relay process, reported by :meth:`maybe_report` once a minute."""

    def __init__(self, using: str | None = None) -> None:
        self.using = using
        self.delivered = 0
        self.failed = 0
        self._lock = threading.Lock()
        self._last = time.monotonic()

    def add(self, *, delivered: int = 0, failed: int = 0) -> None:
        with self._lock:
            self.delivered += delivered
            self.failed += failed

    def overdue(self) -> int:
        """Undelivered intents deliverable for more than ``REPORT_EVERY`` seconds."""
        return count_overdue(REPORT_EVERY, using=database_alias(self.using))

    def maybe_report(self, *, force: bool = False) -> bool:
        """Log ``delivered=, failed=, overdue=`` and the seconds they were counted over at
        INFO if a minute passed (or ``force``), then start counting again; whether a line
        was logged. A line is logged between rounds, so it may cover more than a minute."""
        now = time.monotonic()
        if not force and now - self._last < REPORT_EVERY:
            return False
        with self._lock:
            delivered, failed = self.delivered, self.failed
            self.delivered = self.failed = 0
            counted, self._last = now - self._last, now
        logger.info(
            "relay: delivered=%d failed=%d overdue=%d (database %r, last %.0fs)",
            delivered,
            failed,
            self.overdue(),
            self.using,
            counted,
        )
        return True


class Heartbeat:
    """The heartbeat of this process: :meth:`beat` writes ``RelayHeartbeat`` (this host
    and pid) at most every :data:`HEARTBEAT_EVERY` seconds."""

    def __init__(self) -> None:
        self._last: float | None = None
        self._started = timezone.now()
        self._lock = threading.Lock()

    @staticmethod
    def name() -> str:
        return f"{socket.gethostname()}:{os.getpid()}"[:255]

    def beat(self, using: str, *, force: bool = False) -> bool:
        """Record that this relay ran a round now, unless it did less than
        ``HEARTBEAT_EVERY`` seconds ago (``force`` writes anyway); whether it wrote. A
        database error is logged and swallowed: a heartbeat never fails a round."""
        now = time.monotonic()
        with self._lock:
            if not force and self._last is not None and now - self._last < HEARTBEAT_EVERY:
                return False
            self._last = now
        seen = timezone.now()
        rows = RelayHeartbeat.objects.using(using)
        try:
            with transaction.atomic(using=using):
                rows.update_or_create(
                    name=self.name(),
                    defaults={"seen_at": seen, "database": using},
                    create_defaults={
                        "seen_at": seen,
                        "database": using,
                        "started_at": self._started,
                    },
                )
                rows.filter(seen_at__lt=seen - HEARTBEAT_FORGET).delete()
        except DatabaseError:
            logger.warning("relay: could not record its heartbeat", exc_info=True)
            return False
        return True


#: The heartbeat of this process (written by ``relay_once``).
heartbeat = Heartbeat()

#: The counts of this process (the relay loop adds deliveries, failed batches add failures).
counts = RelayCounts()

__all__ = [
    "HEARTBEAT_EVERY",
    "REPORT_EVERY",
    "Heartbeat",
    "RelayCounts",
    "counts",
    "heartbeat",
    "log_startup",
]
