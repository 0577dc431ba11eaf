"""``Idempotency-Key``: exactly-once writes over HTTP.

A key belongs to one principal (``http:<user pk>``) and is bound, on first use, to a
fingerprint of the request (method, target, condition, media type, parsed body). A store
write made under the key carries ``StoreStepId(principal, "idempotency:<key>")``, so the
applied-steps ledger commits it at most once and a retry gets the recorded result; the
fingerprint is what the ledger cannot hold, and it turns a different request under a used
key into ``422``. The claim is released again when the write is known not to have
committed (a rejected body, a failed precondition), so the key can be used for a
corrected request, as clients expect.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Final

from django.db import IntegrityError, transaction
from rest_framework.request import Request

from ..core.results import StoreStepId
from ..models.api import IdempotencyKey
from .exceptions import IdempotencyKeyReused, InvalidHeader

HEADER: Final = "Idempotency-Key"
MAX_IDEMPOTENCY_KEY_LENGTH: Final = 200
_VALID_KEY: Final = re.compile(rf"[\x20-\x7e]{{1,{MAX_IDEMPOTENCY_KEY_LENGTH}}}")


def principal_of(request: Request) -> str:
    """The execution id of the ledger entries an authenticated user's keys make."""
    return f"http:{request.user.pk}"


def fingerprint(*parts: Any) -> str:
    """SHA-256 of the canonical JSON of ``parts``."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass
class Claim:
    """A key claimed by this request: ``created`` when this request used it first."""

    record: IdempotencyKey
    created: bool

    @property
    def step_id(self) -> StoreStepId:
        return StoreStepId(self.record.principal, f"idempotency:{self.record.key}")

    def release(self) -> None:
        """Forget a claim this request created, when its write did not commit."""
        if self.created:
            IdempotencyKey.objects.filter(pk=self.record.pk).delete()

    def remember_instance(self, instance_id: str | None) -> None:
        """Keep the instance the write committed to, for the ETag of replays."""
        if instance_id and self.record.instance_id != instance_id:
            IdempotencyKey.objects.filter(pk=self.record.pk).update(instance_id=instance_id)
            self.record.instance_id = instance_id


def read_key(request: Request) -> str | None:
    """The request's ``Idempotency-Key``, if any. Raises ``InvalidHeader`` (``400``)."""
    key = request.headers.get(HEADER)
    if key is None:
        return None
    if not _VALID_KEY.fullmatch(key) or not key.strip():
        raise InvalidHeader(
            f"{HEADER} must be 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} printable ASCII characters."
        )
    return key


def claim(request: Request, key: str, *, method: str, target: str, fingerprint: str) -> Claim:
    """Bind ``key`` to this request, or find it bound to the same request before.

    Raises ``IdempotencyKeyReused`` (``422``) when it is bound to a different request.
    """
    principal = principal_of(request)
    defaults = {"fingerprint": fingerprint, "method": method, "target": target[:600]}
    try:
        with transaction.atomic():
            record, created = IdempotencyKey.objects.get_or_create(
                principal=principal, key=key, defaults=defaults
            )
    except IntegrityError:  # pragma: no cover - get_or_create already retries the get
        record, created = IdempotencyKey.objects.get(principal=principal, key=key), False
    if record.fingerprint != fingerprint:
        raise IdempotencyKeyReused(
            f"{HEADER} {key!r} was first used for {record.method} {record.target} with a "
            "different body or condition; use a new key for a new request."
        )
    return Claim(record, created)


__all__ = ["HEADER", "Claim", "claim", "fingerprint", "principal_of", "read_key"]
