"""Execution leases: at most one worker runs an execution at a time.

A lease is an owner token and an expiry in the execution's row, taken by one conditional
UPDATE (free, or expired) and never by a transaction held open across user code. While a
run lasts, a heartbeat thread extends it every third of ``LEASE_SECONDS``; a worker that
dies stops extending it, and a durable timer at the expiry resumes the execution in
another worker. A wake that finds the lease held sets ``wake_pending``, and the holder
runs the workflow again before it lets the lease go, so no wake is lost.
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connections, transaction
from django.db.models import F, Q
from django.utils import timezone

from ..conf import yieldstar_settings
from ..models.runtime import TERMINAL_STATUSES, Execution, ExecutionStatus
from . import timers

logger = logging.getLogger("yieldstar_django.runtime")

__all__ = ["Lease", "LeaseLost", "acquire_lease", "mark_wake_pending"]

#: Seconds after a lease's expiry at which its takeover timer fires.
TAKEOVER_MARGIN = 0.5


class LeaseLost(Exception):
    """The run no longer holds its lease (it expired and was taken over, or the execution
    was cancelled or finished). The run stops without recording anything more."""


def lease_seconds() -> float:
    return float(yieldstar_settings.LEASE_SECONDS)


def _live() -> Q:
    return ~Q(status__in=TERMINAL_STATUSES)


@dataclass
class Lease:
    """A held lease. ``check()`` raises ``LeaseLost`` once the heartbeat saw it lost."""

    execution: Execution
    token: str
    expires_at: datetime
    timer: int | None = None
    lost: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    @property
    def execution_id(self) -> str:
        return self.execution.id

    def owned(self) -> Q:
        """Rows of this execution still leased by this run and not finished."""
        return Q(pk=self.execution.id, lease_owner=self.token) & _live()

    def check(self) -> None:
        if self.lost.is_set():
            raise LeaseLost(self.execution.id)

    def renew(self) -> bool:
        """Extend the lease by ``LEASE_SECONDS``; ``False`` (and ``lost`` set) if it is gone."""
        expires = timezone.now() + timedelta(seconds=lease_seconds())
        renewed = Execution.objects.filter(self.owned()).update(lease_expires_at=expires)
        if renewed:
            self.expires_at = expires
        else:
            self.lost.set()
        return bool(renewed)

    def start_heartbeat(self) -> None:
        """Renew the lease every third of ``LEASE_SECONDS`` from a daemon thread.

        The thread touches the database only if the run outlasts the first interval.
        """
        self._thread = threading.Thread(
            target=self._beat, name=f"yieldstar-lease-{self.execution.id}", daemon=True
        )
        self._thread.start()

    def _beat(self) -> None:
        interval = max(lease_seconds() / 3, 0.05)
        touched = False
        try:
            while not self._stop.wait(interval):
                touched = True
                try:
                    if not self.renew():
                        return
                except Exception:
                    logger.exception("could not renew the lease of %s", self.execution.id)
        finally:
            if touched:
                connections.close_all()

    def stop_heartbeat(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._thread = None


def acquire_lease(execution_id: str) -> Lease | None:
    """Take the execution's lease if it is free or expired and the execution is live.

    In the same transaction, schedules a durable timer just after the lease's expiry, so
    the execution is resumed elsewhere if this worker dies. Returns ``None`` if the lease
    is held by another run, or the execution is finished or missing.
    """
    token = uuid.uuid4().hex
    now = timezone.now()
    expires = now + timedelta(seconds=lease_seconds())
    with transaction.atomic():
        taken = (
            Execution.objects.filter(_live(), pk=execution_id)
            .filter(Q(lease_owner="") | Q(lease_expires_at__lt=now))
            .update(
                lease_owner=token,
                lease_expires_at=expires,
                wake_pending=False,
                status=ExecutionStatus.RUNNING,
                runs=F("runs") + 1,
                updated_at=now,
            )
        )
        if not taken:
            return None
        execution = Execution.objects.get(pk=execution_id)
        timer = timers.schedule_timer(
            execution.id,
            execution.workflow_name,
            expires + timedelta(seconds=TAKEOVER_MARGIN),
            reason="lease",
        )
    return Lease(execution, token, expires, timer)


def mark_wake_pending(execution_id: str) -> bool:
    """Flag a wake for the current, unexpired lease holder. ``False`` if there is none."""
    return bool(
        Execution.objects.filter(
            _live(),
            pk=execution_id,
            lease_expires_at__isnull=False,
            lease_expires_at__gte=timezone.now(),
        ).update(wake_pending=True)
    )
