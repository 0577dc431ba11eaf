"""``CasStoreClient``: the read/compute/compare-and-swap loop over a connector's atomic
primitives (:mod:`.commits`).

It runs all application code (``initial``, updaters, selectors, claims, schemas) outside
any storage transaction and hands the connector only canonical text to commit; on a
conflict it reads again and retries, with jittered backoff, at most
``RetryPolicy.max_attempts`` times. The ledger is looked up first: a step already applied
returns its recorded result. See ``docs/internals/architecture.md#stores``.
"""

from __future__ import annotations

import time
import uuid
from abc import abstractmethod
from typing import Any

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
from .compute import call_sync, finalize, prepare_update, require_sync, validate_state
from .definition import StoreDefinition
from .drafts import WriteLog, build_draft, detach
from .durable import DEFAULT_LIMITS, DurableLimits, decode_durable, encode_durable
from .errors import StoreContentionError
from .results import (
    DELETE_RECORD,
    StoreDeleted,
    StoreDeleteFromResult,
    StoreSnapshot,
    StoreStepId,
    StoreTakeMatched,
    StoreTakeResult,
    StoreTakeUnmatched,
    StoreUpdateResult,
    delete_from_record,
    take_from_record,
    take_record,
    update_from_record,
    update_record,
)
from .selectors import track_selector, unwrap_selected
from .store import Claim, Selector, StoreClient, Updater, is_selector_match

__all__ = ["CasStoreClient"]


class CasStoreClient(StoreClient):
    """Store operations as read/compute/compare-and-swap loops over a connector's primitives.

    Subclasses implement the storage primitives and never run application callbacks while
    holding a storage transaction.
    """

    def __init__(
        self, *, limits: DurableLimits | None = None, retry: RetryPolicy | None = None
    ) -> None:
        self._limits = limits or DEFAULT_LIMITS
        self._retry = retry or RetryPolicy()

    # configuration hooks (a connector may read them from settings on every call)

    def durable_limits(self) -> DurableLimits:
        return self._limits

    def retry_policy(self) -> RetryPolicy:
        return self._retry

    def create_instance_id(self) -> str:
        """Names a new instance of a store."""
        return str(uuid.uuid4())

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

    # shared machinery

    def _initial(self, definition: StoreDefinition, id: str, step_key: str) -> StoredState:
        value = call_sync(definition.initial, "initial", id)
        _, encoded = validate_state(definition, value, self.durable_limits(), step_key)
        return StoredState(self.create_instance_id(), 0, encoded)

    def _read_or_initialize(
        self, definition: StoreDefinition, id: str, step_key: str
    ) -> tuple[StoredState, bool]:
        return self._row_or_initial(definition, id, step_key, self.read_store(definition, id))

    def _get_or_insert(self, definition: StoreDefinition, id: str, step_key: str) -> StoredState:
        return self._row_or_insert(definition, id, step_key, self.read_store(definition, id))

    def _begin(
        self, definition: StoreDefinition, id: str, step_id: StoreStepId | None
    ) -> tuple[dict[str, Any] | None, StoredState | None]:
        """The first reads of an operation: the decoded ledger text of ``step_id`` (which
        wins over everything, so it comes before any argument check), else the store row."""
        if step_id is None:
            return None, self.read_store(definition, id)
        recorded, row = self.read_store_and_step(definition, id, step_id)
        if recorded is not None:
            return _decode_record(recorded), None
        return None, row

    def _row_or_initial(
        self, definition: StoreDefinition, id: str, step_key: str, row: StoredState | None
    ) -> tuple[StoredState, bool]:
        if row is not None:
            return row, False
        return self._initial(definition, id, step_key), True

    def _row_or_insert(
        self, definition: StoreDefinition, id: str, step_key: str, row: StoredState | None
    ) -> StoredState:
        if row is not None:
            return row
        return self.insert_store(definition, id, self._initial(definition, id, step_key))

    def _wait_before_retry(self, definition: StoreDefinition, id: str, attempts: int) -> bool:
        """Raise ``StoreContentionError`` at the cap; else back off. True if it slept (so
        whatever the caller read before is stale and must be read again)."""
        policy = self.retry_policy()
        if attempts >= policy.max_attempts:
            raise StoreContentionError(definition.name, id, attempts)
        delay = policy.delay(attempts)
        if delay > 0:
            time.sleep(delay)
            return True
        return False

    # operations

    def get_store(self, definition: StoreDefinition, id: str) -> StoreSnapshot:
        stored = self._get_or_insert(definition, id, "")
        return StoreSnapshot(decode_durable(stored.encoded), stored.instance_id, stored.version)

    def _conditional_update(
        self,
        definition: StoreDefinition,
        id: str,
        updater: Updater,
        condition: VersionCondition | None,
        step_id: StoreStepId | None,
    ) -> StoreWrite:
        """The one update loop."""
        applied, row = self._begin(definition, id, step_id)
        if applied is not None:
            assert step_id is not None
            return StoreWrite(update_from_record(applied, step_id), None)
        if condition is not None:
            condition.check()
        require_sync(updater, "updater")
        step_key = step_id.step_key if step_id else ""
        kind = "update" if condition is None else "update_from"
        if condition is None:
            stored, created = self._row_or_initial(definition, id, step_key, row)
        else:
            stored, created = self._row_or_insert(definition, id, step_key, row), False
        attempts = 0
        while True:
            if condition is not None and not condition.accepts(stored):
                return StoreWrite(condition.update_conflict(stored), None)
            attempts += 1
            outcome, encoded = self._commit_update(
                definition, id, stored, created, updater, step_id, kind
            )
            if outcome.status == "committed":
                result = StoreUpdateResult(
                    decode_durable(encoded), stored.version, stored.version + 1
                )
                return StoreWrite(result, stored.instance_id)
            recorded = self._settled(outcome, definition, id, step_id)
            if recorded is not None:
                assert step_id is not None
                return StoreWrite(update_from_record(recorded, step_id), None)
            stored, created = self._reread(definition, id, step_key, outcome, condition)
            if condition is not None and not condition.accepts(stored):
                continue
            if self._wait_before_retry(definition, id, attempts):
                stored, created = self._reread(definition, id, step_key, MISSING, condition)

    def _reread(
        self,
        definition: StoreDefinition,
        id: str,
        step_key: str,
        outcome: CommitOutcome,
        condition: VersionCondition | None,
    ) -> tuple[StoredState, bool]:
        """The row a lost commit reported, else a fresh read. A missing store is started
        from ``initial``: inserted at once for a conditional write, else by the commit."""
        if outcome.current is not None:
            return outcome.current, False
        if condition is None:
            return self._read_or_initialize(definition, id, step_key)
        return self._get_or_insert(definition, id, step_key), False

    def _conditional_delete(
        self,
        definition: StoreDefinition,
        id: str,
        condition: VersionCondition,
        step_id: StoreStepId | None,
    ) -> StoreDeleteFromResult:
        """The one delete loop."""
        applied, row = self._begin(definition, id, step_id)
        if applied is not None:
            assert step_id is not None
            return delete_from_record(applied, step_id)
        condition.check()
        step_key = step_id.step_key if step_id else ""
        current = self._row_or_insert(definition, id, step_key, row)
        attempts = 0
        while condition.accepts(current):
            attempts += 1
            outcome = self.commit_deletion(
                StoreDeletion(definition, id, current, step_id, DELETE_RECORD if step_id else None)
            )
            if outcome.status == "committed":
                return StoreDeleted()
            recorded = self._settled(outcome, definition, id, step_id)
            if recorded is not None:
                assert step_id is not None
                return delete_from_record(recorded, step_id)
            current = outcome.current or self._get_or_insert(definition, id, step_key)
            if condition.accepts(current) and self._wait_before_retry(definition, id, attempts):
                current = self._get_or_insert(definition, id, step_key)
        return condition.delete_conflict(current)

    def take_from_store(
        self,
        definition: StoreDefinition,
        id: str,
        *,
        selector: Selector,
        claim: Claim | None,
        step_id: StoreStepId | None = None,
    ) -> StoreTakeResult:
        applied, row = self._begin(definition, id, step_id)
        if applied is not None:
            assert step_id is not None
            return take_from_record(applied, step_id)
        require_sync(selector, "selector")
        if claim is not None:
            require_sync(claim, "claim")
        step_key = step_id.step_key if step_id else ""
        limits = self.durable_limits()
        stored, created = self._row_or_initial(definition, id, step_key, row)
        attempts = 0
        while True:
            log = WriteLog()
            draft = build_draft(decode_durable(stored.encoded), log)
            found, read_paths = track_selector(
                draft, lambda view: call_sync(selector, "selector", view)
            )
            if not is_selector_match(found):
                if created:
                    current = self.insert_store(definition, id, stored)
                    if current.instance_id != stored.instance_id:
                        stored, created = current, False
                        continue
                return StoreTakeUnmatched(stored.instance_id, stored.version, tuple(read_paths))
            attempts += 1
            selected = unwrap_selected(found, max_depth=limits.max_depth)
            if claim is not None:
                call_sync(claim, "claim", draft, selected)
            encoded, paths = finalize(
                definition, stored.encoded, draft, draft, log, limits, step_key
            )
            # Checked before the commit, so a selection that cannot be recorded changes nothing.
            selected_encoded = encode_durable(
                detach(selected),
                limits=limits,
                step_key=step_key,
                label=f'Store take selection for "{definition.name}"',
            )
            version = stored.version + 1
            record = None
            if step_id:
                record = take_record(stored.instance_id, selected_encoded, version)
            outcome = self.commit_mutation(
                StoreMutation(
                    definition, id, stored, created, encoded, paths, step_id, record, "take"
                )
            )
            if outcome.status == "committed":
                return StoreTakeMatched(
                    decode_durable(selected_encoded), stored.instance_id, version
                )
            recorded = self._settled(outcome, definition, id, step_id)
            if recorded is not None:
                assert step_id is not None
                return take_from_record(recorded, step_id)
            if self._wait_before_retry(definition, id, attempts) or outcome.current is None:
                stored, created = self._read_or_initialize(definition, id, step_key)
            else:
                stored, created = outcome.current, False

    def _commit_update(
        self,
        definition: StoreDefinition,
        id: str,
        stored: StoredState,
        created: bool,
        updater: Updater,
        step_id: StoreStepId | None,
        kind: str,
    ) -> tuple[CommitOutcome, str]:
        """Compute ``updater`` from ``stored`` and try to commit it once."""
        step_key = step_id.step_key if step_id else ""
        limits = self.durable_limits()
        encoded, paths = prepare_update(definition, stored.encoded, updater, limits, step_key)
        record = None
        if step_id:
            record = update_record(kind, encoded, stored.version, stored.version + 1)
        mutation = StoreMutation(
            definition, id, stored, created, encoded, paths, step_id, record, "update"
        )
        return self.commit_mutation(mutation), encoded

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


def _decode_record(text: str) -> dict[str, Any]:
    record = decode_durable(text)
    if not isinstance(record, dict):
        raise ValueError(f"a ledger text is a JSON object, not {text[:40]!r}")
    return record
