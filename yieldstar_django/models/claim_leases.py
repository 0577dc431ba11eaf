"""Leased claims: a ``step.take(..., lease=seconds)`` that hands its item back on expiry."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.utils import timezone

from ..core.durable import decode_durable
from .decoded import Decoded
from .keys import natural_key

__all__ = ["ClaimDelivery", "ClaimLeaseRecord", "ClaimLeaseState"]


class ClaimLeaseState(models.TextChoices):
    """``held`` until the holder completes or releases it, or it expires (released by the
    sweeper or the admin's "release now"). An expiry on a value's last delivery
    (``max_deliveries``) ends it ``dead_lettered``, which the admin's "requeue" ends
    ``requeued``."""

    HELD = "held", "held"
    COMPLETED = "completed", "completed"
    RELEASED = "released", "released"
    EXPIRED = "expired", "expired"
    DEAD_LETTERED = "dead_lettered", "dead-lettered"
    REQUEUED = "requeued", "requeued"


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
    #: Which leased take of its value this one is: 1, or one more than the expiries the
    #: value's earlier leases ended with (counted for stores with ``max_deliveries``).
    delivery = models.IntegerField(default=1, db_default=1)
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


class ClaimDelivery(models.Model):
    """How many leases of one value of a store instance expired and handed it back: the
    delivery count of a store with ``max_deliveries``. A value is known by the digest of
    its canonical encoding (``value_digest``), so equal values share a count. Written in
    the transaction of the hand-back that counts; deleted when a lease of the value is
    completed or dead-lettered, and with its store instance."""

    store_name = models.CharField(max_length=255)
    store_id = models.CharField(max_length=255)
    instance_id = models.CharField(max_length=64)
    #: SHA-256 of the value's canonical encoding, in hex.
    value_digest = models.CharField(max_length=64)
    expiries = models.IntegerField(default=0)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "yieldstar_claim_delivery"
        constraints = natural_key(
            "yieldstar_claim_delivery_key", "store_name", "store_id", "instance_id", "value_digest"
        )
        verbose_name = "claim delivery count"

    def __str__(self) -> str:
        return f"{self.store_name}/{self.store_id} {self.value_digest[:12]}: {self.expiries}"
