"""Leased claims: ``step.take(..., lease=seconds)``, ``step.release``, ``step.complete``.

A leased take claims like ``take`` and, in the same transaction, records a lease row
(:class:`~yieldstar_django.models.ClaimLeaseRecord`) that is ``held`` until ``expires_at``.
A lease leaves ``held`` exactly once, by a conditional update: ``complete`` ends it;
``release``, the sweeper (:func:`expire_due`, run by the relay) and the admin's "release
now" hand the value back by running the definition's ``release(draft, value)`` as a store
update with its own step id, ``StoreStepId(<holder execution>, "<take key>:release")``;
the lease's update commits with that store update (on the in-memory client, in a
transaction of its own inside the store's commit), so the item is handed back at most
once. A hand-back goes only to the instance of the store the value was taken from: a lease
whose store was deleted since (or deleted and used again) ends with nothing handed back.
User code (selectors, claims, ``release``) never runs inside a transaction.

Dead letters: a store defined with ``max_deliveries`` counts the leases of each value
that expired (:class:`~yieldstar_django.models.ClaimDelivery`, in the hand-back's
transaction, after the lease's conditional update, so a lease is counted once however many
sweepers race); a leased take records which delivery of its value it is (the lease's
``delivery``), and the expiry of a lease on the value's ``max_deliveries``-th delivery runs
``dead_letter(draft, value)`` instead of ``release``, under the same ledger step id, and
ends the lease ``dead_lettered``. :func:`requeue` runs the definition's ``requeue`` on a
dead-lettered lease's value the same way (step id ``"<take key>:requeue"``) and ends it
``requeued``.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime, timedelta
from typing import Any

from django.db import connections, transaction
from django.db.models import Q
from django.utils import timezone

from .. import clock
from ..conf import yieldstar_settings
from ..connector import CommitHook, DatabaseStoreClient, get_store_client
from ..core.commits import StoreMutation
from ..core.definition import StoreDefinition, get_definition
from ..core.durable import decode_durable
from ..core.memory import MemoryStoreClient
from ..core.results import StoreStepId
from ..core.store import StoreClient
from ..models.claim_leases import ClaimDelivery, ClaimLeaseRecord, ClaimLeaseState
from ..models.runtime import StepKind
from ..sql import queries
from . import store_steps
from .context import Kind, LedgerKey, StepContext
from .outcomes import StepResult, StepValue
from .steps import ClaimLease, StepCall, derived_key, foreign_lease

__all__ = [
    "END_LEASE",
    "TAKE_LEASE",
    "ClaimLease",
    "end_lease",
    "expire_due",
    "expire_for_relay",
    "lease_id",
    "release_key",
    "release_now",
    "requeue",
    "requeue_key",
    "value_digest",
]

logger = logging.getLogger("yieldstar_django.runtime")

_SECOND = timedelta(seconds=1)


def lease_id(execution_id: str, step_key: str) -> str:
    """The id of the lease taken by one take step (one per step, ever)."""
    return f"{execution_id}/{step_key}"


def release_key(step_key: str) -> str:
    """The ledger step key of the hand-back of the lease taken by step ``step_key``."""
    return derived_key(step_key, ":release")


def requeue_key(step_key: str) -> str:
    """The ledger step key of the requeue of a value dead-lettered from the lease of step
    ``step_key``."""
    return derived_key(step_key, ":requeue")


def value_digest(value_json: str) -> str:
    """What a value's delivery count is keyed by: the SHA-256 of its canonical encoding."""
    return hashlib.sha256(value_json.encode()).hexdigest()


def _delivery_key(record: ClaimLeaseRecord) -> dict[str, str]:
    return {
        "store_name": record.store_name,
        "store_id": record.store_id,
        "instance_id": record.instance_id,
        "value_digest": value_digest(record.value_json),
    }


def _count_expiry(record: ClaimLeaseRecord, alias: str) -> None:
    """One more expired lease of ``record``'s value (in the current transaction)."""
    key = _delivery_key(record)
    connection = connections[alias]
    with connection.cursor() as cursor:
        cursor.execute(
            queries.of(connection).count_claim_expiry,
            [
                key["store_name"],
                key["store_id"],
                key["instance_id"],
                key["value_digest"],
                connection.ops.adapt_datetimefield_value(timezone.now()),
            ],
        )


def _forget_deliveries(record: ClaimLeaseRecord, alias: str) -> None:
    """The value of ``record`` left the queue (completed or dead-lettered): its count goes."""
    ClaimDelivery.objects.using(alias).filter(**_delivery_key(record)).delete()


def _counts(definition: StoreDefinition | None) -> bool:
    return definition is not None and definition.max_deliveries is not None


def _lease(ctx: StepContext, value: Any, seconds: float) -> ClaimLease:
    call = ctx.call
    assert call.definition is not None
    return ClaimLease(
        lease_id(ctx.execution_id, ctx.key), call.definition.name, call.store_id, value, seconds
    )


def take(ctx: StepContext) -> StepResult:
    """Engine step ``take_lease``: ``take``, with the lease row written in the transaction
    that commits the claim and its heap row. The heap row records the lease: its
    ``wake_at`` is the lease's ``expires_at``, its ``recorded_at`` when it was taken. The
    lease row records the instance of the store the claim committed on."""
    call, key = ctx.call, ctx.key
    assert call.definition is not None
    definition = call.definition
    length = timedelta(seconds=call.seconds)

    def create_lease(selected_json: str, now: datetime, instance_id: str) -> datetime:
        delivery = 1
        if _counts(definition):
            # The hand-back that put this value back counted its expiry in the commit
            # that made the value takeable, so this read (after the claim's commit, in
            # its transaction) sees every expiry of it.
            expiries = (
                ClaimDelivery.objects.using(ctx.alias)
                .filter(
                    store_name=definition.name,
                    store_id=call.store_id,
                    instance_id=instance_id,
                    value_digest=value_digest(selected_json),
                )
                .values_list("expiries", flat=True)
                .first()
            )
            delivery = (expiries or 0) + 1
        record, _ = ClaimLeaseRecord.objects.using(ctx.alias).get_or_create(
            id=lease_id(ctx.execution_id, key),
            defaults={
                "execution_id": ctx.execution_id,
                "step_key": key,
                "store_name": definition.name,
                "store_id": call.store_id,
                "instance_id": instance_id,
                "value_json": selected_json,
                "delivery": delivery,
                "expires_at": now + length,
            },
        )
        return record.expires_at

    result = store_steps.take(ctx, also=create_lease)
    if isinstance(result, StepValue):
        return StepValue(_lease(ctx, result.value, length / _SECOND))
    return result


def replayed(ctx: StepContext) -> ClaimLease:
    """The ``ClaimLease`` of a recorded leased take: the lease its heap row recorded
    (``wake_at`` - ``recorded_at``), not the one the replaying code asks for. A row written
    before leases were recorded there (no ``wake_at``) replays with the code's length."""
    row = ctx.row
    assert row is not None
    if row.wake_at is not None and row.recorded_at is not None:
        seconds = (row.wake_at - row.recorded_at) / _SECOND
    else:
        seconds = ctx.call.seconds
    return _lease(ctx, decode_durable(row.value_json), seconds)


def end(ctx: StepContext) -> StepResult:
    """Engine step ``end_lease`` (``step.release`` / ``step.complete``): ``True`` if this
    step ended a held lease, ``False`` if it had already ended (expired, say). The heap
    row commits with the lease's end (and the hand-back's store update). A hand-back that
    reaches ``CAS_MAX_ATTEMPTS`` committed nothing (the lease is still held): the step runs
    again a second later, as a contended ``take`` or ``update`` does."""
    action, claim = ctx.call.args
    state = ClaimLeaseState.RELEASED if action == "release" else ClaimLeaseState.COMPLETED

    def record(ended: bool) -> None:
        ctx.record("true" if ended else "false")

    ended = end_lease(
        claim.lease_id,
        state,
        ctx.client,
        using=ctx.alias,
        also=record,
        holder=ctx.execution_id,
        action=action,
    )
    return StepValue(ended)


def _ledger_keys(call: StepCall, key: str) -> tuple[LedgerKey, ...]:
    """A leased take's ledger entries: its claim's, its hand-back's (or dead letter's)
    and its requeue's."""
    ((name, store_id, _),) = store_steps.store_key(call, key)
    return (
        (name, store_id, key),
        (name, store_id, release_key(key)),
        (
            name,
            store_id,
            requeue_key(key),
        ),
    )


TAKE_LEASE = Kind(
    StepKind.TAKE_LEASE,
    take,
    replayed,
    ledger_keys=_ledger_keys,
    waiters=store_steps.own_key,
)
END_LEASE = Kind(StepKind.END_LEASE, end)


class _AlreadyEnded(Exception):
    """Rolls back a hand-back whose lease another process ended first."""


class _StoreGone(Exception):
    """Stops a hand-back (before its commit) into a store that is not the instance the
    lease's value was taken from: deleted since (the commit would create it again), or
    deleted and used again (a new instance, which never held the value)."""


def _taken_from(record: ClaimLeaseRecord) -> Callable[[StoreMutation], None]:
    """A check of a hand-back's mutation: ``_StoreGone`` unless it commits on the instance
    ``record`` was taken from (a lease recorded without its instance, by an earlier
    release, is handed back to whatever instance there is, as it was)."""

    def check(mutation: StoreMutation) -> None:
        if record.instance_id and (
            mutation.created or mutation.expected.instance_id != record.instance_id
        ):
            raise _StoreGone(record.pk)

    return check


def end_lease(
    id: str,
    state: str,
    client: StoreClient,
    *,
    using: str | None = None,
    also: Callable[[bool], None] | None = None,
    holder: str | None = None,
    action: str = "release",
) -> bool:
    """Move lease ``id`` from ``held`` to ``state``; returns whether this call ended it.

    For ``released``/``expired`` the definition's ``release(draft, value)`` runs as a
    store update (outside any transaction, in the store client's CAS loop), and the lease's
    conditional update commits with it (a commit hook), so a value is handed back at most
    once. An expiry of a store with ``max_deliveries`` counts the value's expiry in that
    transaction; on the value's last delivery it runs ``dead_letter`` instead and ends the
    lease ``dead_lettered`` (a completion forgets the count). A hand-back goes only to the
    instance of the store the value was taken from: if the store was deleted since (or
    deleted and used again), the lease ends with nothing handed back (and nothing created).
    ``also(ended)`` is more database work committed with the outcome. With ``holder`` (an
    execution id), a lease that execution did not take raises ``ValueError`` before
    anything is written (``action`` names the step in its message).
    """
    alias = using or yieldstar_settings.DATABASE_ALIAS
    plain_state = state

    def mark() -> bool:
        return bool(
            ClaimLeaseRecord.objects.using(alias)
            .filter(pk=id, state=ClaimLeaseState.HELD)
            .update(state=state, ended_at=timezone.now())
        )

    record = ClaimLeaseRecord.objects.using(alias).filter(pk=id).first()
    if holder is not None and (record is None or record.execution_id != holder):
        raise ValueError(foreign_lease(action, id))
    definition = None if record is None else get_definition(record.store_name)
    if record is None or record.state != ClaimLeaseState.HELD or state == ClaimLeaseState.COMPLETED:
        with transaction.atomic(using=alias):
            ended = record is not None and mark()
            if ended and record is not None and _counts(definition):
                _forget_deliveries(record, alias)  # done with: the next one starts afresh
            if also is not None:
                also(ended)
        return ended
    if definition is None or definition.release is None:
        raise LookupError(f"lease {id!r}: store {record.store_name!r} has no release callback here")
    release, value_json = definition.release, record.value_json
    counted = False
    if state == ClaimLeaseState.EXPIRED and _counts(definition):
        assert definition.max_deliveries is not None and definition.dead_letter is not None
        if record.delivery >= definition.max_deliveries:
            release, state = definition.dead_letter, ClaimLeaseState.DEAD_LETTERED
        else:
            counted = True

    def settle() -> None:
        """What the lease's end does to its value's count, after ``mark`` won."""
        assert record is not None
        if state == ClaimLeaseState.DEAD_LETTERED:
            _forget_deliveries(record, alias)
        elif counted:
            _count_expiry(record, alias)

    def hand_back(draft: Any) -> Any:
        # Each attempt gets the value as taken, as it gets a fresh draft: a lost attempt's
        # changes to it (or to the draft through it) must not carry over to the next.
        return release(draft, decode_durable(value_json))

    step_id = StoreStepId(record.execution_id, release_key(record.step_key))
    ran: list[bool] = []
    check = _taken_from(record)

    def work() -> None:
        if not mark():
            raise _AlreadyEnded(id)
        settle()
        if also is not None:
            also(True)
        ran.append(True)

    hook = _in_the_commit(client, alias, work, check)
    if hook is None:
        # A database client of another database: end the lease first (so a complete
        # racing it fails), then hand back (the ledger makes a repeated hand-back a no-op);
        # a hand-back that fails puts the lease back to held, and ``also`` runs after. A
        # store gone since the take gets nothing, and the lease stays ended (not a dead
        # letter). The count moves once the hand-back is done: only the call that ended
        # the lease gets there (a crash in between leaves the expiry uncounted).
        with transaction.atomic(using=alias):
            ended = mark()
        if ended:
            try:
                with _checked(client, check):
                    client.update_store(
                        definition, record.store_id, updater=hand_back, step_id=step_id
                    )
            except _StoreGone:
                ClaimLeaseRecord.objects.using(alias).filter(pk=id, state=state).update(
                    state=plain_state
                )
                _gone(record)
            except BaseException:
                ClaimLeaseRecord.objects.using(alias).filter(pk=id, state=state).update(
                    state=ClaimLeaseState.HELD, ended_at=None
                )
                raise
            else:
                with transaction.atomic(using=alias):
                    settle()
        if also is not None:
            with transaction.atomic(using=alias):
                also(ended)
        return ended
    try:
        with hook:
            client.update_store(definition, record.store_id, updater=hand_back, step_id=step_id)
    except _AlreadyEnded:
        pass
    except _StoreGone:
        # Nothing to hand back to: end the lease on its own (``also`` with it); the value
        # went with its store, so it is not a dead letter either.
        state = plain_state
        with transaction.atomic(using=alias):
            ended = mark()
            if also is not None:
                also(ended)
        if ended:
            _gone(record)
        return ended
    if ran:
        return True
    # Another process ended it first (or its hand-back is already in the ledger).
    with transaction.atomic(using=alias):
        if also is not None:
            also(False)
    return False


def _in_the_commit(
    client: StoreClient,
    alias: str,
    work: Callable[[], None],
    check: Callable[[StoreMutation], None],
) -> AbstractContextManager[None] | None:
    """A context in which ``client``'s next store commit does ``work`` (the lease's end
    and the step's record, on ``alias``) and applies only if it returns: in the commit's
    transaction on the database client of ``alias``, in a transaction of its own inside
    the commit on the in-memory client; ``None`` for a client that cannot (a database
    client of another database). ``check(mutation)`` runs before each commit: what it
    raises stops the store call with nothing committed."""
    if isinstance(client, DatabaseStoreClient) and client.using != alias:
        return None

    def atomic_work() -> None:
        with transaction.atomic(using=alias):
            work()

    done = atomic_work if isinstance(client, MemoryStoreClient) else work

    def prepare(mutation: StoreMutation) -> Callable[[], None]:
        check(mutation)
        return done

    return _hooked(client, prepare)


def _checked(
    client: StoreClient, check: Callable[[StoreMutation], None]
) -> AbstractContextManager[None]:
    """A context in which ``client``'s store commits run ``check(mutation)`` first (and
    nothing more), where the client can take a hook."""

    def prepare(mutation: StoreMutation) -> Callable[[], None]:
        check(mutation)
        return lambda: None

    return _hooked(client, prepare) or nullcontext()


def _hooked(
    client: StoreClient, prepare: Callable[[StoreMutation], Callable[[], None]]
) -> AbstractContextManager[None] | None:
    """``client``'s commit hook running ``prepare(mutation)`` before each commit and what it
    returns in it (the database and in-memory clients); ``None`` for another client."""
    if isinstance(client, DatabaseStoreClient):
        return client.commit_hook(CommitHook(prepare))
    if isinstance(client, MemoryStoreClient):
        return client.commit_hook(prepare)
    return None


def _gone(record: ClaimLeaseRecord) -> None:
    logger.warning(
        "claim lease %s ended with nothing handed back: its store %s/%s was deleted since "
        "the take (the value went with it)",
        record.pk,
        record.store_name,
        record.store_id,
    )


def _client(client: StoreClient | None) -> StoreClient:
    if client is not None:
        return client
    return get_store_client()


def expire_for_relay(using: str) -> None:
    """The relay's upkeep (``wakes.relay.every_round``): hand back expired leased claims
    when the relay runs on the database that holds them (a relay of another database
    leaves them alone)."""
    if using == yieldstar_settings.DATABASE_ALIAS:
        expire_due()


def release_now(
    ids: list[str], *, client: StoreClient | None = None, state: str = ClaimLeaseState.RELEASED
) -> int:
    """Hand back the held leases among ``ids`` now; returns how many this call ended.

    Each lease is its own transaction; one whose release fails is logged and stays held.
    """
    store_client = _client(client)
    ended = 0
    for id in ids:
        try:
            ended += end_lease(id, state, store_client)
        except Exception:
            logger.exception("could not release the claim lease %s", id)
    return ended


def requeue(ids: list[str], *, client: StoreClient | None = None, using: str | None = None) -> int:
    """Take the dead-lettered values of leases ``ids`` back into their queues; returns
    how many this call requeued.

    The definition's ``requeue(draft, value)`` runs as a store update (the client's
    compare-and-swap loop, never a blind write) with the step id ``StoreStepId(<holder
    execution>, "<take key>:requeue")``, and the lease's conditional update from
    ``dead_lettered`` to ``requeued`` commits with it, so a value is requeued at most once
    however many requeues race. Only into the store instance the value was taken from. Each
    lease is its own transaction; one that fails (no ``requeue`` callback here, its store
    deleted since, a callback that raises) is logged and stays dead-lettered.
    """
    store_client = _client(client)
    alias = using or yieldstar_settings.DATABASE_ALIAS
    done = 0
    for id in ids:
        try:
            done += _requeue_one(id, store_client, alias)
        except _StoreGone:
            logger.warning("dead letter %s not requeued: its store was deleted since", id)
        except Exception:
            logger.exception("could not requeue the dead letter %s", id)
    return done


def _requeue_one(id: str, client: StoreClient, alias: str) -> bool:
    record = (
        ClaimLeaseRecord.objects.using(alias)
        .filter(pk=id, state=ClaimLeaseState.DEAD_LETTERED)
        .first()
    )
    if record is None:
        return False
    definition = get_definition(record.store_name)
    if definition is None or definition.requeue is None:
        raise LookupError(f"lease {id!r}: store {record.store_name!r} has no requeue callback here")
    callback, value_json = definition.requeue, record.value_json

    def put_back(draft: Any) -> Any:
        return callback(draft, decode_durable(value_json))

    def mark(frm: str, to: str) -> bool:
        return bool(ClaimLeaseRecord.objects.using(alias).filter(pk=id, state=frm).update(state=to))

    step_id = StoreStepId(record.execution_id, requeue_key(record.step_key))
    check = _taken_from(record)
    ran: list[bool] = []

    def work() -> None:
        if not mark(ClaimLeaseState.DEAD_LETTERED, ClaimLeaseState.REQUEUED):
            raise _AlreadyEnded(id)
        ran.append(True)

    hook = _in_the_commit(client, alias, work, check)
    if hook is None:
        # A database client of another database: mark first, put back after (the ledger
        # makes a repeated one a no-op); a failure marks it dead-lettered again.
        with transaction.atomic(using=alias):
            if not mark(ClaimLeaseState.DEAD_LETTERED, ClaimLeaseState.REQUEUED):
                return False
        try:
            with _checked(client, check):
                client.update_store(definition, record.store_id, updater=put_back, step_id=step_id)
        except BaseException:
            mark(ClaimLeaseState.REQUEUED, ClaimLeaseState.DEAD_LETTERED)
            raise
        return True
    try:
        with hook:
            client.update_store(definition, record.store_id, updater=put_back, step_id=step_id)
    except _AlreadyEnded:
        return False
    return bool(ran)


#: Where the sweep's last round stopped, ``(expires_at, id)``: the next goes on after it.
_sweep_after: list[tuple[datetime, str]] = []


def expire_due(
    *, now: datetime | None = None, client: StoreClient | None = None, limit: int = 100
) -> int:
    """Hand back the held leases whose ``expires_at`` has passed by ``now`` (by default
    the timers' clock, :mod:`yieldstar_django.clock`) (state ``expired``); returns how many
    this call ended. Safe to run from several processes at once.

    A round tries at most ``limit`` leases, the longest due first, going on after those
    the round before tried (and round to the first again): one whose release fails stays
    held and is tried again later, but never keeps the others from their turn.
    """
    due = ClaimLeaseRecord.objects.filter(
        state=ClaimLeaseState.HELD, expires_at__lte=now or clock.now()
    ).order_by("expires_at", "pk")
    picked: list[tuple[datetime, str]] = []
    if _sweep_after:
        at, pk = _sweep_after[0]
        later = due.filter(Q(expires_at__gt=at) | Q(expires_at=at, pk__gt=pk))
        picked = list(later.values_list("expires_at", "pk")[:limit])
    if len(picked) < limit:
        seen = {pk for _, pk in picked}
        first = [row for row in due.values_list("expires_at", "pk")[:limit] if row[1] not in seen]
        picked += first[: limit - len(picked)]
    if not picked:
        return 0
    _sweep_after[:] = [picked[-1]]
    return release_now([pk for _, pk in picked], client=client, state=ClaimLeaseState.EXPIRED)
