"""Handing wakes to the ``WAKE_BACKEND``: after a commit (``deliver_on_commit``), while a
commit is acknowledged (``publish_during_commit``) and from the relay, with one failure rule
(``hand_over`` is ``publish`` then ``settle``).

Delivery is at least once: a wake may be delivered twice (the relay and a slow worker
racing), and several wakes of one execution are coalesced into one; a wake is never lost,
because its intent stays unacknowledged until a run of the execution starts.
``resume_execution`` is idempotent, so a duplicate costs one spurious run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from django.db import transaction

from ..conf import database_alias, yieldstar_settings
from ..core.results import Wake
from . import relay_log
from .outbox import PendingWake, push_back, record_failure, write_intents

__all__ = [
    "OnCommitDelivery",
    "deliver_on_commit",
    "deliver_wakes",
    "hand_over",
    "publish",
    "publish_during_commit",
    "settle",
    "wake_now",
]

logger = logging.getLogger("yieldstar_django.wakes")


def _coalesce(wakes: Iterable[Wake]) -> list[Wake]:
    seen: dict[str, Wake] = {}
    for wake in wakes:
        seen.setdefault(wake.execution_id, wake)
    return list(seen.values())


def hand_over(pending: Sequence[PendingWake], *, using: str, relay: bool = False) -> bool:
    """Hand ``pending`` wakes (their intents committed) to the ``WAKE_BACKEND``; return
    whether it accepted them.

    A refusal is logged and recorded on the intents (a failed delivery, retried by the relay
    ``RELAY_INTERVAL`` later, doubling). With ``relay`` (the relay's batches) an accepted
    delivery pushes the intents' ``available_at`` back, and a failure to record a refusal
    raises (the relay's round fails and is retried); otherwise nothing is written when the
    backend accepts, and recording a refusal is best effort: this never raises.
    """
    if not pending:
        return True
    return settle(pending, publish(pending), using=using, relay=relay)


def publish(pending: Sequence[PendingWake]) -> BaseException | None:
    """Call the ``WAKE_BACKEND`` with the wakes of ``pending`` (one per execution); return
    what it raised (logged), ``None`` if it accepted them. Writes nothing."""
    try:
        yieldstar_settings.wake_backend(_coalesce(p.wake for p in pending))
    except Exception as exc:
        logger.warning(
            "wake backend failed for %d wake(s); the relay will retry them",
            len(pending),
            exc_info=True,
        )
        return exc
    return None


def settle(
    pending: Sequence[PendingWake],
    failure: BaseException | None,
    *,
    using: str,
    relay: bool = False,
) -> bool:
    """Record the outcome of :func:`publish` on the intents, as :func:`hand_over` says;
    return whether the backend accepted them."""
    ids = [p.intent_id for p in pending]
    if failure is not None:
        if relay:
            relay_log.counts.add(failed=len(pending))
            record_failure(using, ids, failure)
            return False
        try:
            record_failure(using, ids, failure)
        except Exception:
            logger.warning("could not record the failed delivery", exc_info=True)
        return False
    if relay:
        push_back(using, ids)
    return True


def publish_during_commit(pending: Sequence[PendingWake], *, using: str) -> Callable[[], None]:
    """Publish ``pending`` now, while the commit that wrote their intents is acknowledged
    (:mod:`yieldstar_django.connector.overlap`); return what to run once it is: recording a
    refusal, as after a commit. Only for an ``enqueues_only`` backend."""
    failure = publish(pending) if pending else None

    def after() -> None:
        if failure is not None:
            settle(pending, failure, using=using)

    return after


def deliver_wakes(pending: Sequence[PendingWake], *, using: str | None = None) -> bool:
    """Hand wakes whose transaction committed to the ``WAKE_BACKEND`` now; never raises
    (``hand_over`` without ``relay``)."""
    using = database_alias(using)
    return hand_over(pending, using=using)


def deliver_on_commit(pending: Sequence[PendingWake], *, using: str | None = None) -> None:
    """Deliver ``pending`` when the current transaction on ``using`` commits (now, in
    autocommit mode); nothing is delivered if it rolls back."""
    using = database_alias(using)
    if pending:
        transaction.on_commit(OnCommitDelivery(tuple(pending), using), using=using)


@dataclass(frozen=True)
class OnCommitDelivery:
    """The ``on_commit`` hook of :func:`deliver_on_commit` (named, so that
    ``yieldstar_django.testing`` can find the wakes a test transaction holds back)."""

    pending: tuple[PendingWake, ...]
    using: str

    def __call__(self) -> None:
        hand_over(self.pending, using=self.using)


def wake_now(
    execution_id: str, workflow_id: str, *, reason: str = "wake", using: str | None = None
) -> int:
    """Wake an execution when the current transaction commits (at once in autocommit mode).

    The intent is written in the current transaction, so a rollback wakes nobody and a
    crash after the commit leaves it to the relay. Returns the intent id.
    """
    using = database_alias(using)
    with transaction.atomic(using=using):
        pending = write_intents([Wake(execution_id, workflow_id)], reason=reason, using=using)
    deliver_on_commit(pending, using=using)
    return pending[0].intent_id
