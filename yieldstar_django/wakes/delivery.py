"""Handing wakes to the ``WAKE_BACKEND``: after a commit (``deliver_on_commit``) and while
a commit is acknowledged (``publish_during_commit``), each ``publish`` then ``settle``
(``hand_over``); and the relay's claimed batches (``deliver_claimed``), published with no
row of the batch locked.

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
from ..observability import metrics, tracing
from . import relay_log
from .outbox import (
    ClaimedWake,
    PendingWake,
    record_claim_failure,
    record_failure,
    write_intents,
)

__all__ = [
    "OnCommitDelivery",
    "deliver_claimed",
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
    """One wake per execution, a takeover if any of its wakes is one."""
    seen: dict[str, Wake] = {}
    for wake in wakes:
        if wake.takeover or wake.execution_id not in seen:
            seen[wake.execution_id] = wake
    return list(seen.values())


def hand_over(pending: Sequence[PendingWake], *, using: str, traceparent: str = "") -> bool:
    """Hand ``pending`` wakes (their intents committed) to the ``WAKE_BACKEND``; return
    whether it accepted them.

    Nothing is written when the backend accepts. A refusal is logged and recorded on the
    intents (a failed delivery, retried by the relay ``RELAY_INTERVAL`` later, doubling),
    best effort: this never raises.
    """
    if not pending:
        return True
    return settle(pending, publish(pending, traceparent=traceparent), using=using)


def deliver_claimed(claimed: Sequence[ClaimedWake], *, using: str) -> bool:
    """Publish a batch the relay claimed (``outbox.claim_due``, committed: no lock is held
    while the backend works); return whether the backend accepted it.

    The claim counted the delivery and pushed the intents back, so an accepted batch needs
    no more writes. A refusal is counted in the relay's log and recorded on the intents not
    acknowledged meanwhile (``record_claim_failure``: retried ``RELAY_INTERVAL`` later,
    doubling); a failure to record it raises (the relay's round fails; the intents are
    delivered again at the time their claim set).
    """
    if not claimed:
        return True
    failure = publish(claimed, relayed=True)
    if failure is None:
        return True
    relay_log.counts.add(failed=len(claimed))
    record_claim_failure(using, claimed, failure)
    return False


def publish(
    pending: Sequence[PendingWake], *, relayed: bool = False, traceparent: str = ""
) -> BaseException | None:
    """Call the ``WAKE_BACKEND`` with the wakes of ``pending`` (one per execution); return
    what it raised (logged), ``None`` if it accepted them. Writes nothing.

    In a ``yieldstar.wake`` span (the Celery backend sends its trace context with each
    message); ``relayed``: the relay's delivery, not a commit's (its wakes carry no time of
    a commit for ``yieldstar_wake_latency_seconds``, and its takeovers are counted);
    ``traceparent``: the span the wakes were written in, when it is no longer current (a
    delivery on commit), else the current span is the wake span's parent.

    A refusal is logged with its traceback the first time; the same refusal again (an
    outage refuses every round the same way), in one line, until the backend accepts
    wakes again in this process."""
    global _last_refusal
    wakes = _coalesce(p.wake for p in pending)
    try:
        with tracing.span(
            "yieldstar.wake", _wake_attributes(wakes, relayed), parent=traceparent, kind="producer"
        ):
            token = metrics.from_commit.set(not relayed)
            try:
                yieldstar_settings.wake_backend(wakes)
            finally:
                metrics.from_commit.reset(token)
    except Exception as exc:
        refusal = f"{type(exc).__name__}: {exc}"
        if refusal == _last_refusal:
            logger.warning(
                "wake backend failed again for %d wake(s) (%s); the relay will retry them",
                len(pending),
                refusal,
            )
        else:
            _last_refusal = refusal
            logger.warning(
                "wake backend failed for %d wake(s); the relay will retry them",
                len(pending),
                exc_info=True,
            )
        return exc
    _last_refusal = None
    if relayed:
        metrics.lease_takeovers(sum(1 for wake in wakes if wake.takeover))
    return None


def _wake_attributes(wakes: Sequence[Wake], relayed: bool) -> dict[str, str | int | bool]:
    attributes: dict[str, str | int | bool] = {
        "yieldstar.wakes": len(wakes),
        "yieldstar.relayed": relayed,
    }
    if len(wakes) == 1:
        attributes["yieldstar.execution.id"] = wakes[0].execution_id
        attributes["yieldstar.workflow"] = wakes[0].workflow_id
    return attributes


#: The last refusal ``publish`` logged with its traceback (type and message), while the
#: backend has accepted nothing since.
_last_refusal: str | None = None


def settle(pending: Sequence[PendingWake], failure: BaseException | None, *, using: str) -> bool:
    """Record the outcome of :func:`publish` on the intents, as :func:`hand_over` says;
    return whether the backend accepted them. Never raises."""
    if failure is None:
        return True
    try:
        record_failure(using, [p.intent_id for p in pending], failure)
    except Exception:
        logger.warning("could not record the failed delivery", exc_info=True)
    return False


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
        delivery = OnCommitDelivery(tuple(pending), using, tracing.current_traceparent())
        transaction.on_commit(delivery, using=using)


@dataclass(frozen=True)
class OnCommitDelivery:
    """The ``on_commit`` hook of :func:`deliver_on_commit` (named, so that
    ``yieldstar_django.testing`` can find the wakes a test transaction holds back)."""

    pending: tuple[PendingWake, ...]
    using: str
    #: The W3C trace context of the span that wrote the intents (tracing on): the wake's
    #: span continues it, the transaction's commit may come after that span ended.
    traceparent: str = ""

    def __call__(self) -> None:
        hand_over(self.pending, using=self.using, traceparent=self.traceparent)


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
