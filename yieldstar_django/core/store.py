"""The store client interface: ``StoreClient`` (every client's operations) and
``StoreHandle`` (one store bound to a client).

``CasStoreClient`` (:mod:`.cas`) implements it over a connector's atomic primitives
(:mod:`.commits`); ``MemoryStoreClient`` (:mod:`.memory`) in one process.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .commits import StoreWrite, VersionCondition
from .definition import StoreDefinition
from .results import (
    StoreDeleteFromResult,
    StoreSnapshot,
    StoreStepId,
    StoreTakeResult,
    StoreUpdateFromResult,
    StoreUpdateResult,
    StoreWaiter,
)

__all__ = [
    "Claim",
    "Replacement",
    "Selector",
    "StoreCall",
    "StoreClient",
    "StoreHandle",
    "Updater",
    "is_selector_match",
]

Updater = Callable[[Any], Any]
Selector = Callable[[Any], Any]
Claim = Callable[[Any, Any], Any]


class Replacement:
    """An updater that replaces the state whatever it is: ``Replacement(make)`` returns
    ``make()``. The core knows it needs no draft, so it never decodes the old state for
    one (the changed paths are diffed against the stored text, a member at a time): a
    large replacement holds the new state, not the old one beside it.

    ``done``, when given, is called with the new state's canonical text once an attempt
    has checked and encoded it, before the commit: a caller that can make the value again
    from that text (should a later attempt need it) may free the value then, so that the
    commit holds the text, not the value beside it."""

    __slots__ = ("done", "make")

    def __init__(self, make: Callable[[], Any], done: Callable[[str], None] | None = None) -> None:
        self.make = make
        self.done = done

    def __call__(self, draft: Any) -> Any:
        return self.make()


def is_selector_match(value: Any) -> bool:
    """A selector matches with any result but ``None`` and ``False`` (``0`` and ``""`` match)."""
    return value is not None and value is not False


@dataclass(frozen=True, slots=True)
class StoreCall:
    """What every store operation names: the store (``definition``, ``id``) and the step
    making it, if any (the ledger's key)."""

    definition: StoreDefinition
    id: str
    step_id: StoreStepId | None


class StoreHandle:
    """One store bound to a client: ``client.store(definition, id)``."""

    def __init__(self, client: StoreClient, definition: StoreDefinition, id: str) -> None:
        self.client = client
        self.definition = definition
        self.id = id

    def get(self) -> StoreSnapshot:
        return self.client.get_store(self.definition, self.id)

    def update(self, updater: Updater, *, step_id: StoreStepId | None = None) -> StoreUpdateResult:
        return self.client.update_store(self.definition, self.id, updater=updater, step_id=step_id)

    def update_from(
        self, snapshot: StoreSnapshot, updater: Updater, *, step_id: StoreStepId | None = None
    ) -> StoreUpdateFromResult:
        return self.client.update_store_from(
            self.definition, self.id, snapshot=snapshot, updater=updater, step_id=step_id
        )

    def delete_from(
        self, snapshot: StoreSnapshot, *, step_id: StoreStepId | None = None
    ) -> StoreDeleteFromResult:
        return self.client.delete_store_from(
            self.definition, self.id, snapshot=snapshot, step_id=step_id
        )

    def take(
        self, selector: Selector, claim: Claim | None, *, step_id: StoreStepId | None = None
    ) -> StoreTakeResult:
        return self.client.take_from_store(
            self.definition, self.id, selector=selector, claim=claim, step_id=step_id
        )

    def __repr__(self) -> str:
        return f"<StoreHandle {self.definition.name}/{self.id}>"


class StoreClient(ABC):
    """The store operations. Every one except ``delete_store`` first creates a missing store
    from ``definition.initial(id)`` in the same atomic write; concurrent first touches record
    exactly one initial state (version 0 of a new instance).

    Updaters, selectors and claims must be synchronous, deterministic and side-effect free:
    a CAS client may run them again after losing a race. With a ``step_id`` a committed
    update, take or delete is recorded in the applied-steps ledger in the same transaction,
    and a repeated call returns the recorded result verbatim without running user code. An
    exception does not prove a rollback; only a retry with the same ``step_id`` is
    exactly-once.
    """

    def store(self, definition: StoreDefinition, id: str) -> StoreHandle:
        return StoreHandle(self, definition, id)

    @abstractmethod
    def get_store(self, definition: StoreDefinition, id: str) -> StoreSnapshot:
        """The store's current snapshot (creating it if missing)."""

    def update_store(
        self,
        definition: StoreDefinition,
        id: str,
        *,
        updater: Updater,
        step_id: StoreStepId | None = None,
    ) -> StoreUpdateResult:
        """Apply ``updater`` atomically, recomputing from the newer state after a conflict.

        ``updater(draft)`` mutates the draft in place or returns a replacement (``None``
        means the draft). Raises ``StoreContentionError`` after ``CAS_MAX_ATTEMPTS``.
        """
        write = self.update_store_if(
            definition, id, updater=updater, condition=None, step_id=step_id
        )
        assert isinstance(write.result, StoreUpdateResult), "no condition, no conflict"
        return write.result

    def update_store_from(
        self,
        definition: StoreDefinition,
        id: str,
        *,
        snapshot: StoreSnapshot,
        updater: Updater,
        step_id: StoreStepId | None = None,
    ) -> StoreUpdateFromResult:
        """Update only if the store is still at ``snapshot``'s (instance_id, version).

        A mismatch returns a ``StoreUpdateConflict`` and changes nothing. The updater runs on
        a fresh copy of the stored state, never on ``snapshot.state``.
        """
        condition = VersionCondition.exactly(snapshot.instance_id, snapshot.version)
        return self.update_store_if(
            definition, id, updater=updater, condition=condition, step_id=step_id
        ).result

    def update_store_if(
        self,
        definition: StoreDefinition,
        id: str,
        *,
        updater: Updater,
        condition: VersionCondition | None,
        step_id: StoreStepId | None = None,
    ) -> StoreWrite:
        """``update_store`` (no ``condition``) or a compare-and-swap that commits only over
        a version ``condition`` accepts (the HTTP API's ``If-Match``).

        Either way the updater runs on the state read inside the retry loop, so a lost race
        recomputes from the newer state, with the client's backoff and retry cap. With a
        condition a missing store is created first (as ``update_store_from`` does) and a
        version the condition refuses is a ``StoreUpdateConflict``; nothing changes.
        """
        return self._conditional_update(StoreCall(definition, id, step_id), updater, condition)

    def take_from_store(
        self,
        definition: StoreDefinition,
        id: str,
        *,
        selector: Selector,
        claim: Claim | None,
        step_id: StoreStepId | None = None,
    ) -> StoreTakeResult:
        """Select and claim atomically. A match commits ``claim(draft, selected)`` with one
        version bump; no match commits nothing and returns the version and read paths a
        waiter must register with (so no wake can fall between the read and the wait)."""
        return self._take(StoreCall(definition, id, step_id), selector, claim)

    @abstractmethod
    def register_waiter(self, waiter: StoreWaiter) -> bool:
        """Register a read observation, linearizably with mutations: one whose
        (instance_id, since_version) is not current is woken at once; a current one by the
        first later mutation whose changed paths intersect its read paths. It stays until
        ``remove_waiters`` (the runtime calls it when the heap records the step). ``True``:
        registered (a client may offer to register nothing instead of a stale one)."""

    @abstractmethod
    def remove_waiters(self, execution_id: str, step_key: str | None = None) -> None:
        """Forget the waiters of an execution (of one step, when ``step_key`` is given)."""

    @abstractmethod
    def list_stores(self, definition: StoreDefinition) -> list[str]:
        """Ids of every store of ``definition``, in ascending code-point order."""

    @abstractmethod
    def delete_store(self, definition: StoreDefinition, id: str) -> None:
        """Remove the store and its waiters (waking them). Ledger entries stay authoritative
        across re-creation. A no-op for a missing store; never creates one."""

    def delete_store_from(
        self,
        definition: StoreDefinition,
        id: str,
        *,
        snapshot: StoreSnapshot,
        step_id: StoreStepId | None = None,
    ) -> StoreDeleteFromResult:
        """Delete only if the store is still at ``snapshot``. A missing store is created
        first, so the result is a conflict with the new instance."""
        condition = VersionCondition.exactly(snapshot.instance_id, snapshot.version)
        return self.delete_store_if(definition, id, condition=condition, step_id=step_id)

    def delete_store_if(
        self,
        definition: StoreDefinition,
        id: str,
        *,
        condition: VersionCondition,
        step_id: StoreStepId | None = None,
    ) -> StoreDeleteFromResult:
        """Delete the store at a version ``condition`` accepts, retrying a lost race with
        backoff while the newer version is still accepted. A missing store is created
        first (as ``delete_store_from`` does); a refused version is a conflict."""
        return self._conditional_delete(StoreCall(definition, id, step_id), condition)

    # what a client implements

    @abstractmethod
    def _conditional_update(
        self, call: StoreCall, updater: Updater, condition: VersionCondition | None
    ) -> StoreWrite:
        """What ``update_store_if`` does; every other update is made of it."""

    @abstractmethod
    def _conditional_delete(
        self, call: StoreCall, condition: VersionCondition
    ) -> StoreDeleteFromResult:
        """What ``delete_store_if`` does; ``delete_store_from`` is made of it."""

    @abstractmethod
    def _take(self, call: StoreCall, selector: Selector, claim: Claim | None) -> StoreTakeResult:
        """What ``take_from_store`` does."""
