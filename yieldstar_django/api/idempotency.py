"""``Idempotency-Key``: exactly-once writes over HTTP.

A key belongs to one principal (``http:<user pk>``) and is bound, on first use, to a
fingerprint of the request (method, target, condition, media type, parsed body). A store
write made under the key carries ``StoreStepId(principal, "idempotency:<key>")``, so the
applied-steps ledger commits it at most once and a retry gets the recorded result; the
fingerprint is what the ledger cannot hold, and it turns a different request under a used
key into ``422``. The claim is released again when the write is known not to have
committed (a rejected body, a failed precondition), so the key can be used for a
corrected request, as clients expect; but not once a retry of the request found the key
(``shared``): the retry runs on its own and may commit under the key, which must then stay
bound to the request.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Final

from django.db import IntegrityError, connections, router, transaction
from rest_framework.request import Request

from ..core.results import StoreStepId
from ..models.api import IdempotencyKey
from ..models.stores import StoreInstance, StoreVersion
from ..principals import http_principal
from ..sql import queries
from .exceptions import Contention, IdempotencyKeyReused, InvalidHeader

HEADER: Final = "Idempotency-Key"
MAX_IDEMPOTENCY_KEY_LENGTH: Final = 200
#: How often ``claim`` tries again when the key it found was freed before it could mark it.
MAX_CLAIM_ATTEMPTS: Final = 10
_VALID_KEY: Final = re.compile(rf"[\x20-\x7e]{{1,{MAX_IDEMPOTENCY_KEY_LENGTH}}}")


def principal_of(request: Request) -> str:
    """The execution id of the ledger entries an authenticated user's keys make."""
    return http_principal(request.user.pk)


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
        """Forget a claim this request created, when its write did not commit, unless a
        retry found it meanwhile (the retry may commit under the key).

        One statement, so that it and a retry's mark (``claim``) are ordered: a retry that
        marks the key first keeps it; one that comes second claims the key afresh."""
        if self.created:
            connection = connections[router.db_for_write(IdempotencyKey)]
            with connection.cursor() as cursor:
                cursor.execute(
                    queries.of(connection).release_idempotency_key, [self.record.pk, False]
                )

    def remember_instance(self, instance_id: str | None) -> None:
        """Keep the instance the write committed to, for the ETag of replays."""
        if instance_id and self.record.instance_id != instance_id:
            IdempotencyKey.objects.filter(pk=self.record.pk).update(instance_id=instance_id)
            self.record.instance_id = instance_id

    def recorded_instance(self, name: str, store_id: str, version: int) -> str:
        """The instance the write made under the key committed ``version`` of, for the
        ETag of a replay ("" when unknown): the one remembered on the key, read again (a
        twin request may have remembered it since this one claimed the key), else the
        store's current instance when its history names this key's step at ``version``
        (the twin committed but has not remembered it yet, or died before it could)."""
        if not self.record.instance_id:
            remembered = IdempotencyKey.objects.filter(pk=self.record.pk).values_list(
                "instance_id", flat=True
            )
            self.record.instance_id = remembered.first() or ""
        if not self.record.instance_id:
            step = self.step_id
            current = (
                StoreInstance.objects.filter(name=name, store_id=store_id)
                .values_list("instance_id", flat=True)
                .first()
            )
            committed = current and StoreVersion.objects.filter(
                instance_id=current,
                version=version,
                step_execution_id=step.execution_id,
                step_key=step.step_key,
            )
            if committed and committed.exists():
                self.remember_instance(current)
        return self.record.instance_id


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
    for _ in range(MAX_CLAIM_ATTEMPTS):
        try:
            with transaction.atomic(using=router.db_for_write(IdempotencyKey)):
                record, created = IdempotencyKey.objects.get_or_create(
                    principal=principal, key=key, defaults=defaults
                )
        except IntegrityError:  # pragma: no cover - get_or_create already retries the get
            continue
        if record.fingerprint != fingerprint:
            raise IdempotencyKeyReused(
                f"{HEADER} {key!r} was first used for {record.method} {record.target} with "
                "a different body or condition; use a new key for a new request."
            )
        if created:
            return Claim(record, True)
        # A retry: the first request may still be running and fail (and free the key)
        # after this one committed under it. The mark keeps the key; if it finds nothing,
        # the first request freed the key (nothing was committed under it): claim it anew.
        if record.shared or IdempotencyKey.objects.filter(pk=record.pk).update(shared=True):
            record.shared = True
            return Claim(record, False)
    raise Contention(
        f"{HEADER} {key!r} was claimed and freed again {MAX_CLAIM_ATTEMPTS} times while this "
        "request tried to claim it; retry later."
    )


__all__ = ["HEADER", "Claim", "claim", "fingerprint", "principal_of", "read_key"]
