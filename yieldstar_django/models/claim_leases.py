"""Leased claims: a ``step.take(..., lease=seconds)`` that hands its item back on expiry."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.utils import timezone

from ..core.durable import decode_durable
from .decoded import Decoded

__all__ = ["ClaimLeaseRecord", "ClaimLeaseState"]


class ClaimLeaseState(models.TextChoices):
    """``held`` until the holder completes or releases it, or it expires (released by the
    sweeper or the admin's "release now")."""

    HELD = "held", "held"
    COMPLETED = "completed", "completed"
    RELEASED = "released", "released"
    EXPIRED = "expired", "expired"


class ClaimLeaseRecord(models.Model):
    """One leased claim: what was taken (``value_json``) from which store (and which
    instance of it, ``instance_id``), by which execution step, until when. Leaves ``held``
    exactly once (a conditional update)."""

    id = models.CharField(primary_key=True, max_length=600)
    execution_id = models.CharField(max_length=255, db_index=True)
    step_key = models.CharField(max_length=255)
    store_name = models.CharField(max_length=255)
    store_id = models.CharField(max_length=255)
    #: The instance of the store the value was taken from: a hand-back goes only to it
    #: (empty on leases recorded before the column existed).
    instance_id = models.CharField(max_length=64, blank=True, default="")
    value_json = models.TextField()
    state = models.CharField(
        max_length=16, choices=ClaimLeaseState.choices, default=ClaimLeaseState.HELD
    )
    expires_at = models.DateTimeField()
    created_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "yieldstar_claim_lease"
        ordering = ["expires_at"]
        indexes = [models.Index(fields=["state", "expires_at"], name="yieldstar_lease_due")]
        verbose_name = "claim lease"

    def __str__(self) -> str:
        return f"{self.store_name}/{self.store_id} held by {self.execution_id} ({self.state})"

    value = Decoded[Any](
        "value_json", decode_durable, "The claimed value (what the release callback hands back)."
    )
