"""HTTP API models: the ``Idempotency-Key`` claims of the store and execution endpoints."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from .keys import natural_key

__all__ = ["IdempotencyKey"]


class IdempotencyKey(models.Model):
    """One ``Idempotency-Key`` of one principal, bound to the first request that used it.

    ``fingerprint`` hashes what makes two requests the same (method, target, conditions and
    the parsed body), so a retry is recognised and a different request under the same key
    is refused with ``422``. The outcome itself lives in the applied-steps ledger (stores)
    or is the execution the key names (executions); ``instance_id`` is kept after a store
    write so that a replay can answer with the store's ETag. ``shared`` keeps a key whose
    first request failed bound when a retry of it found the key meanwhile.
    """

    principal = models.CharField("principal", max_length=64)
    key = models.CharField("idempotency key", max_length=255)
    fingerprint = models.CharField("request fingerprint (SHA-256)", max_length=64)
    method = models.CharField("method", max_length=8)
    target = models.CharField("target", max_length=600)
    instance_id = models.CharField("instance id", max_length=64, blank=True, default="")
    #: Set by a retry that found the key bound to its request while the first request may
    #: still be running: from then on the key is never freed (the retry may commit).
    shared = models.BooleanField("used by a retry", default=False, db_default=False)
    created_at = models.DateTimeField("first used", default=timezone.now, db_index=True)

    class Meta:
        constraints = natural_key("yieldstar_idempotency_key", "principal", "key")
        #: The admin's search by key alone (the unique index leads with the principal).
        indexes = [models.Index(fields=["key"], name="yieldstar_idem_key_idx")]

    def __str__(self) -> str:
        return f"{self.principal} {self.key!r} ({self.method} {self.target})"
