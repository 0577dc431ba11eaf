"""``CasStoreClient``: the read/compute/compare-and-swap loop over a connector's atomic
primitives (:mod:`.commits`).

It runs all application code (``initial``, updaters, selectors, claims, schemas) outside
any storage transaction and hands the connector only canonical text to commit; on a
conflict it reads again and retries, with jittered backoff, at most
``RetryPolicy.max_attempts`` times.

A write starts from the last committed row the client saw of the store
(:class:`.snapshots.SnapshotCache`) when it has one: an uncontended write is then one
round trip, the commit. Whatever that speculative start would report without committing
(a refused condition, no match, an error of the application's code) is confirmed from a
fresh read first, so results are those of a start from the current row; a commit that
loses because the row was old retries from the row the commit reports. The ledger is looked
up first (by the commit itself after a speculative start): a step already applied returns
its recorded result. See ``docs/internals/architecture.md#stores``.
"""

from __future__ import annotations

import uuid
from abc import abstractmethod
from contextlib import AbstractContextManager, nullcontext
from typing import Any, TypedDict

from .commits import (
    MISSING,
    CommitOutcome,
    RetryPolicy,
    StoreDeletion,
    StoredState,
    StoreMutation,
    StoreWrite,
    VersionCondition,
)
from .compute import (
    Attempt,
    call_sync,
    decode_stored,
    plan_take,
    plan_update,
    require_sync,
    validate_state,
)
from .definition import StoreDefinition
from .durable import DEFAULT_LIMITS, DurableLimits, decode_durable
from .results import (
    DELETE_RECORD,
    StoreDeleted,
    StoreDeleteFromResult,
    StoreSnapshot,
    StoreStepId,
    StoreTakeMatched,
    StoreTakeResult,
    StoreTakeUnmatched,
    delete_from_record,
    take_from_record,
    update_from_record,
)
from .retries import Retries
from .snapshots import DEFAULT_CAPACITY, SnapshotCache
from .store import Claim, Selector, StoreCall, StoreClient, Updater

__all__ = ["CasOptions", "CasStoreClient"]


class CasOptions(TypedDict, total=False):
    """The keyword options of ``CasStoreClient``, for subclasses that pass them on."""

    limits: DurableLimits | None
    retry: RetryPolicy | None
    snapshots: int


class CasStoreClient(StoreClient):
    """Store operations as read/compute/compare-and-swap loops over a connector's primitives.

    Subclasses implement the storage primitives and never run application callbacks while
    holding a storage transaction.
    """

    def __init__(
        self,
        *,
        limits: DurableLimits | None = None,
        retry: RetryPolicy | None = None,
        snapshots: int = DEFAULT_CAPACITY,
    ) -> None:
        self._limits = limits or DEFAULT_LIMITS
        self._retry = retry or RetryPolicy()
        self._snapshot_capacity = snapshots
        self._snapshot_cache = SnapshotCache(snapshots)

    # configuration hooks (a connector may read them from settings on every call)

    def durable_limits(self) -> DurableLimits:
        return self._limits

    def retry_policy(self) -> RetryPolicy:
        return self._retry

    def create_instance_id(self) -> str:
        """Names a new instance of a store."""
        return str(uuid.uuid4())

    def snapshot_capacity(self) -> int:
        """How many stores' last rows to remember (0: every write reads first)."""
        return self._snapshot_capacity

    def queue(
        self, definition: StoreDefinition, id: str, step_id: StoreStepId | None = None
    ) -> AbstractContextManager[None]:
        """The store's queue, entered by a write (of step ``step_id``, if any) that lost
        ``RetryPolicy.queue_after`` races and held until it ends: a context in which its
        next attempt (which reads first) cannot lose, served in arrival order. None here."""
        return nullcontext()

    def may_remember(self) -> bool:
        """Whether what the primitives return now is committed for good. A connector
        answers ``False`` inside a transaction, whose writes a rollback could undo."""
        return True

    # storage primitives

    @abstractmethod
    def read_store(self, definition: StoreDefinition, id: str) -> StoredState | None:
        """The store's row, or ``None`` if it does not exist."""

    @abstractmethod
    def insert_store(
        self, definition: StoreDefinition, id: str, stored: StoredState
    ) -> StoredState:
        """Insert ``stored`` as version 0 unless the store exists; return the row after it."""

    @abstractmethod
    def get_applied_step(
        self, definition: StoreDefinition, id: str, step_id: StoreStepId
    ) -> str | None:
        """The ledger text recorded for (store name, store id, step), if any."""

    def known_read(
        self, definition: StoreDefinition, id: str, step_id: StoreStepId
    ) -> tuple[str | None, StoredState | None] | None:
        """What ``read_store_and_step`` would return, read ahead by the caller (a woken
        run's, with its lease), once; ``None`` when there is none (the default). Its ledger
        text is taken as final; its row is used as a remembered one is (speculatively)."""
        return None

    def read_store_and_step(
        self, definition: StoreDefinition, id: str, step_id: StoreStepId
    ) -> tuple[str | None, StoredState | None]:
        """The ledger text recorded for ``step_id`` and, when there is none, the store row.

        A connector may override it to read both in one round trip.
        """
        recorded = self.get_applied_step(definition, id, step_id)
        if recorded is not None:
            return recorded, None
        return None, self.read_store(definition, id)

    @abstractmethod
    def commit_mutation(self, mutation: StoreMutation) -> CommitOutcome:
        """Atomically: a recorded step result wins; else compare, write, record, wake."""

    @abstractmethod
    def commit_deletion(self, deletion: StoreDeletion) -> CommitOutcome:
        """Atomically: a recorded step result wins; else compare, delete, record, wake."""

    # the snapshot cache: every primitive's answer passes through here

    @property
    def snapshots(self) -> SnapshotCache:
        capacity = self.snapshot_capacity()
        if self._snapshot_cache.capacity != capacity:
            self._snapshot_cache = SnapshotCache(capacity)
        return self._snapshot_cache

    def _remember(self, definition: StoreDefinition, id: str, row: StoredState | None) -> None:
        if row is None:
            self.snapshots.forget(definition.name, id)
        elif self.may_remember():
            self.snapshots.put(definition.name, id, row)

    def _read(self, definition: StoreDefinition, id: str) -> StoredState | None:
        row = self.read_store(definition, id)
        self._remember(definition, id, row)
        return row

    def _insert(self, definition: StoreDefinition, id: str, stored: StoredState) -> StoredState:
        row = self.insert_store(definition, id, stored)
        self._remember(definition, id, row)
        return row

    def _try_mutation(self, mutation: StoreMutation) -> CommitOutcome:
        outcome = self.commit_mutation(mutation)
        definition, id, expected = mutation.definition, mutation.id, mutation.expected
        if outcome.status == "committed":
            after = StoredState(expected.instance_id, expected.version + 1, mutation.encoded_state)
            self._remember(definition, id, after)
        elif outcome.status in ("conflict", "missing"):
            self._remember(definition, id, outcome.current)
        return outcome

    def _try_deletion(self, deletion: StoreDeletion) -> CommitOutcome:
        outcome = self.commit_deletion(deletion)
        if outcome.status in ("committed", "conflict", "missing"):
            self._remember(deletion.definition, deletion.id, outcome.current)
        return outcome

    # shared machinery

    def _initial(self, definition: StoreDefinition, id: str, step_key: str) -> StoredState:
        value = call_sync(definition.initial, "initial", id)
        _, encoded = validate_state(definition, value, self.durable_limits(), step_key)
        return StoredState(self.create_instance_id(), 0, encoded)

    def _read_or_initialize(
        self, definition: StoreDefinition, id: str, step_key: str
    ) -> tuple[StoredState, bool]:
        return self._row_or_initial(definition, id, step_key, self._read(definition, id))

    def _get_or_insert(self, definition: StoreDefinition, id: str, step_key: str) -> StoredState:
        return self._row_or_insert(definition, id, step_key, self._read(definition, id))

    def _begin(
        self, definition: StoreDefinition, id: str, step_id: StoreStepId | None, speculate: bool
    ) -> tuple[dict[str, Any] | None, StoredState | None, bool]:
        """The start of a write: ``(None, row, True)`` when ``speculate`` and a row is at
        hand with no round trip, the client's remembered row (no ``step_id``) or the
        caller's read-ahead of the store and step (``known_read``); else the decoded ledger
        text of ``step_id`` (which wins over everything, so a replay runs no user code and
        no argument check) or the store row, and ``False``. A speculative row may be older
        than the operation: what would end it without a commit reads again."""
        if speculate and step_id is None:
            row = self.snapshots.get(definition.name, id)
            if row is not None:
                return None, row, True
        if step_id is None:
            return None, self._read(definition, id), False
        known = self.known_read(definition, id, step_id) if speculate else None
        if known is not None and known[0] is None:
            return None, known[1], True
        recorded, row = known or self.read_store_and_step(definition, id, step_id)
        if recorded is not None:
            return _decode_record(recorded), None, False
        self._remember(definition, id, row)
        return None, row, False

    def _row_or_initial(
        self, definition: StoreDefinition, id: str, step_key: str, row: StoredState | None
    ) -> tuple[StoredState, bool]:
        if row is not None:
            return row, False
        return self._initial(definition, id, step_key), True

    def _row_or_insert(
        self,
        definition: StoreDefinition,
        id: str,
        step_key: str,
        row: StoredState | None,
        made: list[StoredState] | None = None,
    ) -> StoredState:
        """``row``, else the store inserted from ``initial`` (or the one a racing call
        inserted first); ``made`` collects the rows this call's own insert created."""
        if row is not None:
            return row
        initial = self._initial(definition, id, step_key)
        current = self._insert(definition, id, initial)
        if made is not None and current.instance_id == initial.instance_id:
            made.append(current)
        return current

    # operations

    def get_store(self, definition: StoreDefinition, id: str) -> StoreSnapshot:
        stored = self._get_or_insert(definition, id, "")
        state = decode_stored(definition, id, stored.encoded)
        return StoreSnapshot(state, stored.instance_id, stored.version)

    def _conditional_update(
        self,
        call: StoreCall,
        updater: Updater,
        condition: VersionCondition | None,
        speculate: bool = True,
    ) -> StoreWrite:
        """The one update loop."""
        definition, id, step_id = call.definition, call.id, call.step_id
        applied, row, speculative = self._begin(definition, id, step_id, speculate)
        if applied is not None:
            assert step_id is not None
            return StoreWrite(update_from_record(applied, step_id), None)
        try:
            if condition is not None:
                condition.check()
            require_sync(updater, "updater")
        except Exception:
            if not speculative:
                raise
            return self._conditional_update(call, updater, condition, False)
        step_key = step_id.step_key if step_id else ""
        kind = "update" if condition is None else "update_from"
        stored: StoredState | None
        if condition is None or condition.missing_only:
            stored, created = self._row_or_initial(definition, id, step_key, row)
        elif condition.existing_only:  # a missing store (None) is a conflict, not created
            stored, created = row, False
        else:
            stored, created = self._row_or_insert(definition, id, step_key, row), False
        row = None  # ``stored`` is the only reference the attempt is given (below)
        with Retries(self.retry_policy(), self.queue, definition, id, step_id) as retry:
            while True:
                if stored is None or not _admits(condition, stored, created):
                    assert condition is not None
                    if speculative:
                        return self._conditional_update(call, updater, condition, False)
                    return StoreWrite(condition.update_conflict(stored), None)
                retry.attempts += 1
                try:
                    attempt = Attempt(
                        definition, id, stored, created, step_id, self.durable_limits()
                    )
                    # The attempt's alone: the row's text goes once the new state is
                    # diffed against it, before that state is encoded (a retry reads
                    # the row again).
                    stored = None
                    mutation = plan_update(attempt, updater, kind)
                except Exception:
                    if not speculative:
                        raise
                    return self._conditional_update(call, updater, condition, False)
                speculative = False
                del attempt
                outcome = self._try_mutation(mutation)
                encoded, head = mutation.encoded_state, mutation.expected
                if outcome.status == "committed":
                    return StoreWrite.committed(
                        encoded, head.version, head.version + 1, head.instance_id
                    )
                recorded = self._settled(outcome, definition, id, step_id)
                if recorded is not None:
                    assert step_id is not None
                    return StoreWrite(update_from_record(recorded, step_id), None)
                stored, created = self._reread(definition, id, step_key, outcome, condition)
                if stored is None or not _admits(condition, stored, created):
                    continue
                if retry.wait():
                    stored, created = self._reread(definition, id, step_key, MISSING, condition)

    def _reread(
        self,
        definition: StoreDefinition,
        id: str,
        step_key: str,
        outcome: CommitOutcome,
        condition: VersionCondition | None,
    ) -> tuple[StoredState | None, bool]:
        """The row a lost commit reported, else a fresh read. A missing store is started
        from ``initial``: inserted at once for a conditional write, else by the commit;
        for a condition ``existing_only`` it is ``None`` (nothing is created)."""
        if outcome.current is not None:
            return outcome.current, False
        if condition is None or condition.missing_only:
            return self._read_or_initialize(definition, id, step_key)
        if condition.existing_only:
            return self._read(definition, id), False
        return self._get_or_insert(definition, id, step_key), False

    def _conditional_delete(
        self, call: StoreCall, condition: VersionCondition
    ) -> StoreDeleteFromResult:
        """The one delete loop."""
        definition, id, step_id = call.definition, call.id, call.step_id
        applied, row, speculative = self._begin(definition, id, step_id, True)
        if speculative and row is not None and not _checked_accepts(condition, row):
            applied, row, speculative = self._begin(definition, id, step_id, False)
        if applied is not None:
            assert step_id is not None
            return delete_from_record(applied, step_id)
        condition.check()
        step_key = step_id.step_key if step_id else ""
        # The rows this call created (a missing store is created first): when the step
        # turns out to be recorded already (by a racing call that saw the store missing
        # too, and created and deleted it), the replay must not leave one behind.
        made: list[StoredState] = []
        if condition.missing_only:  # nothing to delete, or a conflict: read, never create
            existing = row if not speculative else self._read(definition, id)
            return StoreDeleted() if existing is None else condition.delete_conflict(existing)
        current: StoredState | None
        if condition.existing_only:  # a missing store (None) is a conflict, not created
            current = self._read(definition, id) if speculative and row is None else row
        else:
            current = self._row_or_insert(definition, id, step_key, row, made)
        with Retries(self.retry_policy(), self.queue, definition, id, step_id) as retry:
            while current is not None and condition.accepts(current):
                retry.attempts += 1
                outcome = self._try_deletion(
                    StoreDeletion(
                        definition, id, current, step_id, DELETE_RECORD if step_id else None
                    )
                )
                if outcome.status == "committed":
                    return StoreDeleted()
                recorded = self._settled(outcome, definition, id, step_id)
                if recorded is not None:
                    assert step_id is not None
                    for untouched in made:  # still at version 0, else nothing is deleted
                        self._try_deletion(StoreDeletion(definition, id, untouched, None, None))
                    return delete_from_record(recorded, step_id)
                current = outcome.current or self._found(condition, definition, id, step_key, made)
                if current is not None and condition.accepts(current) and retry.wait():
                    current = self._found(condition, definition, id, step_key, made)
            return condition.delete_conflict(current)

    def _found(
        self,
        condition: VersionCondition,
        definition: StoreDefinition,
        id: str,
        step_key: str,
        made: list[StoredState],
    ) -> StoredState | None:
        """A fresh read for a delete loop: a missing store inserted from ``initial``, or,
        for a condition ``existing_only``, ``None``."""
        row = self._read(definition, id)
        if condition.existing_only:
            return row
        return self._row_or_insert(definition, id, step_key, row, made)

    def _take(self, call: StoreCall, selector: Selector, claim: Claim | None) -> StoreTakeResult:
        definition, id, step_id = call.definition, call.id, call.step_id
        for speculate in (True, False):
            applied, row, speculative = self._begin(definition, id, step_id, speculate)
            if applied is not None:
                assert step_id is not None
                return take_from_record(applied, step_id)
            try:
                return self._take_from(definition, id, selector, claim, step_id, row, speculative)
            except _Unconfirmed:
                continue  # a speculative start that would not commit: read, then take
        raise AssertionError("a take that read first is never unconfirmed")

    def _take_from(
        self,
        definition: StoreDefinition,
        id: str,
        selector: Selector,
        claim: Claim | None,
        step_id: StoreStepId | None,
        row: StoredState | None,
        speculative: bool,
    ) -> StoreTakeResult:
        """Take from ``row`` on (``None``: a missing store). While ``speculative`` (the
        row is a remembered one and nothing was committed yet), whatever would end the
        take without a commit raises ``_Unconfirmed`` instead."""
        step_key = step_id.step_key if step_id else ""
        stored, created = self._row_or_initial(definition, id, step_key, row)
        with Retries(self.retry_policy(), self.queue, definition, id, step_id) as retry:
            while True:
                try:
                    attempt = Attempt(
                        definition, id, stored, created, step_id, self.durable_limits()
                    )
                    plan = plan_take(attempt, selector, claim)
                except Exception:
                    if speculative:
                        raise _Unconfirmed from None
                    raise
                if isinstance(plan, StoreTakeUnmatched):
                    if speculative:
                        raise _Unconfirmed
                    if created:
                        current = self._insert(definition, id, stored)
                        if current.instance_id != stored.instance_id:
                            stored, created = current, False
                            continue
                    return plan
                retry.attempts += 1
                speculative = False
                mutation, selected_encoded = plan
                outcome = self._try_mutation(mutation)
                if outcome.status == "committed":
                    return StoreTakeMatched(
                        decode_durable(selected_encoded), stored.instance_id, stored.version + 1
                    )
                recorded = self._settled(outcome, definition, id, step_id)
                if recorded is not None:
                    assert step_id is not None
                    return take_from_record(recorded, step_id)
                if retry.wait() or outcome.current is None:
                    stored, created = self._read_or_initialize(definition, id, step_key)
                else:
                    stored, created = outcome.current, False

    def _settled(
        self,
        outcome: CommitOutcome,
        definition: StoreDefinition,
        id: str,
        step_id: StoreStepId | None,
    ) -> dict[str, Any] | None:
        """After a commit that did not apply: the decoded ledger text of ``step_id``, if the
        step committed (in an earlier call, or in a racing one that made this commit
        conflict). The caller turns it into its result type, which raises
        ``StoreStepMismatchError`` for a text of another operation."""
        if outcome.status in ("already-applied", "step-mismatch"):
            assert outcome.recorded is not None
            return _decode_record(outcome.recorded)
        if step_id is None:
            return None
        recorded = self.get_applied_step(definition, id, step_id)
        return None if recorded is None else _decode_record(recorded)


class _Unconfirmed(Exception):
    """A speculative take found no match: confirm it from a fresh read."""


def _admits(condition: VersionCondition | None, stored: StoredState, created: bool) -> bool:
    """Whether an update may commit over ``stored`` (``created``: the initial state of a
    missing store, not yet written)."""
    if condition is None:
        return True
    if condition.missing_only:
        return created
    return condition.accepts(stored)


def _checked_accepts(condition: VersionCondition, row: StoredState) -> bool:
    try:
        condition.check()
    except ValueError:
        return False
    return condition.accepts(row)


def _decode_record(text: str) -> dict[str, Any]:
    record = decode_durable(text)
    if not isinstance(record, dict):
        raise ValueError(f"a ledger text is a JSON object, not {text[:40]!r}")
    return record
