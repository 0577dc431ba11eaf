"""``MemoryStoreClient``: the full store semantics in one process, for unit tests."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Unpack

from . import commits
from .cas import CasOptions, CasStoreClient
from .cohorts import first_of_each_cohort
from .commits import CommitOutcome, StoreDeletion, StoredState, StoreMutation
from .constants import MAX_INSTANCE_ID_LENGTH
from .definition import StoreDefinition
from .keys import check_ledger_key, check_removal, check_store, check_text, check_waiter
from .paths import wakes_waiter
from .results import LedgerOperation, StoreStepId, StoreWaiter, Wake
from .types import StorePath

logger = logging.getLogger("yieldstar_django.memory")

_Key = tuple[str, str]

#: ``prepare(mutation)``: the work to do in a mutation's commit (see ``commit_hook``).
Prepare = Callable[[StoreMutation], Callable[[], None]]

#: The hook of the current context and the client it applies to.
_current_hook: ContextVar[tuple[MemoryStoreClient, Prepare] | None] = ContextVar(
    "yieldstar_memory_commit_hook", default=None
)


@dataclass(frozen=True)
class MemoryVersion:
    """One committed change, kept for inspection by tests."""

    store_name: str
    store_id: str
    instance_id: str
    version: int
    changed_paths: tuple[StorePath, ...]
    step_id: StoreStepId | None


class MemoryStoreClient(CasStoreClient):
    """Thread-safe in-process client with the semantics of the database connector.

    ``on_wake(wakes)`` is called after each commit that wakes executions, outside the lock;
    an exception it raises is logged, never raised into the committed write. The other
    options are ``CasStoreClient``'s. It refuses the keys the database clients refuse
    (:mod:`.keys`), with the same errors, before anything runs.
    """

    def __init__(
        self,
        *,
        on_wake: Callable[[list[Wake]], object] | None = None,
        **options: Unpack[CasOptions],
    ) -> None:
        super().__init__(**options)
        self.on_wake = on_wake
        self._lock = threading.RLock()
        self._stores: dict[_Key, StoredState] = {}
        # The applied-steps ledger: (operation, recorded text) by (store, id, step).
        self._ledger: dict[tuple[str, str, str, str], tuple[LedgerOperation, str]] = {}
        self._waiters: dict[_Key, dict[tuple[str, str], StoreWaiter]] = {}
        # Waiters woken since they registered, by (store, (execution id, step key)).
        self._woken: set[tuple[_Key, tuple[str, str]]] = set()
        self.versions: list[MemoryVersion] = []
        self.commit_attempts = 0

    # primitives

    def read_store(self, definition: StoreDefinition, id: str) -> StoredState | None:
        check_store(definition.name, id)
        with self._lock:
            return self._stores.get((definition.name, id))

    def insert_store(
        self, definition: StoreDefinition, id: str, stored: StoredState
    ) -> StoredState:
        check_store(definition.name, id)
        check_text("instance id", stored.instance_id, MAX_INSTANCE_ID_LENGTH)
        with self._lock:
            existing = self._stores.get((definition.name, id))
            if existing is not None:
                return existing
            self._stores[(definition.name, id)] = stored
            self._log_version(definition.name, id, stored, (), None)
            return stored

    def get_applied_step(
        self, definition: StoreDefinition, id: str, step_id: StoreStepId
    ) -> str | None:
        check_ledger_key(definition.name, id, step_id)
        with self._lock:
            entry = self._ledger.get((definition.name, id, step_id.execution_id, step_id.step_key))
            return None if entry is None else entry[1]

    @contextmanager
    def commit_hook(self, prepare: Prepare) -> Iterator[None]:
        """Do ``prepare(m)()`` in the commit of every mutation ``m`` made on this client in
        this context (this thread or task): the database client's ``CommitHook``, here.

        ``prepare(m)`` runs before the commit (it must not write) and returns the work.
        The work runs under the client's lock once ``m`` compares, before it is applied:
        ``m`` applies only if the work returns, and an exception it raises propagates with
        the store unchanged. A step the ledger holds, or a conflict, runs no work. Work
        that writes a database in a transaction of its own commits with ``m`` (that
        transaction's commit is the one that decides); it must not wait for anything that
        waits for this client's lock. Nests: the innermost hook applies."""
        token = _current_hook.set((self, prepare))
        try:
            yield
        finally:
            _current_hook.reset(token)

    def commit_mutation(self, mutation: StoreMutation) -> CommitOutcome:
        check_ledger_key(mutation.definition.name, mutation.id, mutation.step_id)
        check_text("instance id", mutation.expected.instance_id, MAX_INSTANCE_ID_LENGTH)
        hooked = _current_hook.get()
        work = hooked[1](mutation) if hooked is not None and hooked[0] is self else None
        return self._commit(
            mutation, lambda key, current: self._write(mutation, key, current, work)
        )

    def commit_deletion(self, deletion: StoreDeletion) -> CommitOutcome:
        check_ledger_key(deletion.definition.name, deletion.id, deletion.step_id)
        return self._commit(deletion, lambda key, current: self._delete(deletion, key, current))

    def _commit(
        self,
        commit: StoreMutation | StoreDeletion,
        apply: Callable[[_Key, StoredState | None], CommitOutcome | list[Wake]],
    ) -> CommitOutcome:
        """One atomic commit: a step the ledger holds answers with its recorded result;
        else ``apply(key, current row)`` refuses (an outcome) or makes the change and
        returns the wakes it causes, and the step's result is recorded."""
        key = (commit.definition.name, commit.id)
        with self._lock:
            self.commit_attempts += 1
            if commit.step_id is not None:
                entry = self._ledger.get(self._ledger_key(key, commit.step_id))
                if entry is not None:
                    return commits.recorded_outcome(entry[1], entry[0], commit.operation)
            applied = apply(key, self._stores.get(key))
            if isinstance(applied, CommitOutcome):
                return applied
            if commit.step_id is not None:
                assert commit.encoded_result is not None
                self._ledger[self._ledger_key(key, commit.step_id)] = (
                    commit.operation,
                    commit.encoded_result,
                )
        self._deliver(applied)
        return commits.COMMITTED

    def _write(
        self,
        mutation: StoreMutation,
        key: _Key,
        current: StoredState | None,
        work: Callable[[], None] | None,
    ) -> CommitOutcome | list[Wake]:
        """``apply`` of a mutation: compare, do the hook's ``work``, write, log the
        version; the wakes it causes."""
        expected = mutation.expected
        if mutation.created:
            if current is not None:
                return commits.conflict(current)
        elif current is None:
            return commits.MISSING
        elif (current.instance_id, current.version) != (expected.instance_id, expected.version):
            return commits.conflict(current)
        if work is not None:
            work()
        if mutation.created:
            self._log_version(*key, expected, (), None)
        written = StoredState(expected.instance_id, expected.version + 1, mutation.encoded_state)
        self._stores[key] = written
        self._log_version(*key, written, tuple(mutation.changed_paths), mutation.step_id)
        matched = None  # the cohort of the step's own waiter, woken: it checked and matched
        if mutation.step_id is not None:
            owner = (mutation.step_id.execution_id, mutation.step_id.step_key)
            waiter = self._waiters.get(key, {}).get(owner)
            if waiter is not None and (key, owner) in self._woken:
                matched = waiter.cohort
        wakes = self._matching_wakes(key, written, mutation.changed_paths, matched)
        return wakes + [w for w in self._hand_off(key, matched) if w not in wakes]

    def _delete(
        self, deletion: StoreDeletion, key: _Key, current: StoredState | None
    ) -> CommitOutcome | list[Wake]:
        """``apply`` of a deletion: compare, delete; the wakes of the waiters it drops."""
        if current is None:
            return commits.MISSING
        expected = deletion.expected
        if expected is not None and (current.instance_id, current.version) != (
            expected.instance_id,
            expected.version,
        ):
            return commits.conflict(current)
        del self._stores[key]
        return self._drop_waiters(key)

    # waiters and the rest of the client

    def register_waiter(self, waiter: StoreWaiter) -> bool:
        check_waiter(waiter)
        key = (waiter.store_name, waiter.store_id)
        with self._lock:
            current = self._stores.get(key)
            if current is None:
                wakes = [Wake(waiter.execution_id, waiter.workflow_id)]
            else:
                owner = (waiter.execution_id, waiter.step_key)
                self._waiters.setdefault(key, {})[owner] = waiter
                stale = (current.instance_id, current.version) != (
                    waiter.instance_id,
                    waiter.since_version,
                )
                if stale:  # woken now, by its registration
                    self._woken.add((key, owner))
                else:
                    self._woken.discard((key, owner))
                wakes = [Wake(waiter.execution_id, waiter.workflow_id)] if stale else []
        self._deliver(wakes)
        return True

    def remove_waiters(self, execution_id: str, step_key: str | None = None) -> None:
        check_removal(execution_id, step_key)
        wakes: list[Wake] = []
        with self._lock:
            for key, waiters in self._waiters.items():
                for owner in [k for k in waiters if k[0] == execution_id]:
                    if step_key is None or owner[1] == step_key:
                        removed = waiters.pop(owner)
                        if (key, owner) in self._woken:
                            self._woken.discard((key, owner))
                            claimed = self._ledger_key(key, StoreStepId(*owner)) in self._ledger
                            if not claimed:  # a claim's commit woke the next already
                                wakes += self._hand_off(key, removed.cohort)
        self._deliver(wakes)

    def waiters(self, definition: StoreDefinition, id: str) -> list[StoreWaiter]:
        """Registered waiters of one store (for tests)."""
        check_store(definition.name, id)
        with self._lock:
            return list(self._waiters.get((definition.name, id), {}).values())

    def list_stores(self, definition: StoreDefinition) -> list[str]:
        check_text("store name", definition.name)
        with self._lock:
            return sorted(id for name, id in self._stores if name == definition.name)

    def delete_store(self, definition: StoreDefinition, id: str) -> None:
        self.commit_deletion(StoreDeletion(definition, id, None, None, None))

    # internals

    @staticmethod
    def _ledger_key(key: _Key, step_id: StoreStepId) -> tuple[str, str, str, str]:
        return (key[0], key[1], step_id.execution_id, step_id.step_key)

    def _log_version(
        self,
        name: str,
        id: str,
        stored: StoredState,
        paths: tuple[StorePath, ...],
        step_id: StoreStepId | None,
    ) -> None:
        self.versions.append(
            MemoryVersion(name, id, stored.instance_id, stored.version, paths, step_id)
        )

    def _matching_wakes(
        self,
        key: _Key,
        written: StoredState,
        changed: Iterable[StorePath],
        matched: str | None = None,
    ) -> list[Wake]:
        """The executions with a waiter the change intersects that was not woken since it
        registered (of a cohort the first, and of the ``matched`` cohort none: the commit
        wakes its next waiter, touched or not); those waiters are marked woken."""
        changed = list(changed)
        touched = [
            (owner, waiter)
            for owner, waiter in self._waiters.get(key, {}).items()
            if (key, owner) not in self._woken
            and (waiter.cohort is None or waiter.cohort != matched)
            and (
                waiter.instance_id != written.instance_id
                or wakes_waiter(waiter.read_paths, changed)
            )
        ]
        alone, cohorts = first_of_each_cohort(touched, lambda item: item[1].cohort)
        chosen = {owner for owner, _ in alone} | {members[0][0] for members in cohorts.values()}
        wakes: dict[str, Wake] = {}
        for owner, waiter in touched:
            if owner not in chosen:
                continue
            self._woken.add((key, owner))
            wakes.setdefault(waiter.execution_id, Wake(waiter.execution_id, waiter.workflow_id))
        return list(wakes.values())

    def _hand_off(self, key: _Key, cohort: str | None) -> list[Wake]:
        """A woken waiter of ``cohort`` matched, or went without checking: wake the first
        unwoken one of its cohort (:mod:`yieldstar_django.core.cohorts`)."""
        if cohort is None:
            return []
        for owner, waiter in self._waiters.get(key, {}).items():
            if waiter.cohort == cohort and (key, owner) not in self._woken:
                self._woken.add((key, owner))
                return [Wake(waiter.execution_id, waiter.workflow_id)]
        return []

    def _drop_waiters(self, key: _Key) -> list[Wake]:
        waiters = self._waiters.pop(key, {})
        self._woken -= {(key, owner) for owner in waiters}
        wakes = {w.execution_id: Wake(w.execution_id, w.workflow_id) for w in waiters.values()}
        return list(wakes.values())

    def _deliver(self, wakes: list[Wake]) -> None:
        if not wakes or self.on_wake is None:
            return
        try:
            self.on_wake(wakes)
        except Exception:
            logger.exception("on_wake failed for %d wake(s)", len(wakes))


__all__ = ["MemoryStoreClient", "MemoryVersion"]
