"""``RelayHeartbeat``: when each relay process was last seen, for the health check."""

from __future__ import annotations

from django.db import models

from .keys import natural_key

__all__ = ["RelayHeartbeat"]


class RelayHeartbeat(models.Model):
    """One relay process (``python manage.py yieldstar_relay``, or a Celery worker running
    the beat task ``relay_wakes``): its name (host and pid) and when it last ran a round.

    Written by the relay at most every ``relay_log.HEARTBEAT_EVERY`` seconds; read by
    ``yieldstar_health`` ("no relay seen recently"). Rows of processes gone for a day are
    deleted by the next heartbeat.
    """

    name = models.CharField("relay process", max_length=255)
    database = models.CharField("database alias", max_length=255, blank=True, default="")
    started_at = models.DateTimeField("started")
    seen_at = models.DateTimeField("last seen", db_index=True)

    class Meta:
        constraints = natural_key("yieldstar_relay_heartbeat_name", "name")
        verbose_name = "relay heartbeat"

    def __str__(self) -> str:
        return f"relay {self.name} (seen {self.seen_at:%Y-%m-%d %H:%M:%S})"
