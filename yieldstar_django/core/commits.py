"""The connector protocol: what ``CasStoreClient`` hands a connector to commit, and what a
commit answers.

A connector implements five atomic primitives on these types (``read_store``,
``insert_store``, ``get_applied_step``, ``commit_mutation``, ``commit_deletion``); see
``docs/internals/architecture.md#stores`` and ``#ledger``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from .definition import StoreDefinition
from .durable import decode_durable
from .results import (
    LedgerOperation,
    StoreDeleteConflict,
    StoreStepId,
    StoreUpdateConflict,
    StoreUpdateFromResult,
    StoreUpdateResult,
)
from .types import StorePath, StoreVersion

__all__ = [
    "COMMITTED",
    "MISSING",
    "MISSING_INSTANCE",
    "CommitOutcome",
    "RetryPolicy",
    "StoreDeletion",
    "StoreMutation",
    "StoreWrite",
    "StoredState",
    "VersionCondition",
    "already_applied",
    "conflict",
    "recorded_outcome",
    "step_mismatch",
]


@dataclass(frozen=True, slots=True)
class StoredState:
    """A store row as a connector keeps it: the canonical encoding of the state."""

    instance_id: str
    version: StoreVersion
    encoded: str


@dataclass(frozen=True, slots=True)
class StoreMutation:
    """A computed change to commit atomically.

    Compare (``expected.instance_id``, ``expected.version``), write ``encoded_state`` at
    ``expected.version + 1``, record ``encoded_result`` under ``step_id`` as an
    ``operation`` (a ledger row of ``step_id`` of another operation is a
    ``step-mismatch``) and the wakes that ``changed_paths`` require. With ``created`` the
    store must still be missing and the commit first inserts ``expected`` as version 0;
    else ``expected`` only names the row (an update's carries no text, ``""``: the text
    is let go once the new state is diffed against it).
    """

    definition: StoreDefinition
    id: str
    expected: StoredState
    created: bool
    encoded_state: str
    changed_paths: list[StorePath]
    step_id: StoreStepId | None
    encoded_result: str | None
    operation: LedgerOperation


@dataclass(frozen=True, slots=True)
class StoreDeletion:
    """A deletion to commit atomically if the store is still at ``expected`` (at any
    version when ``expected`` is ``None``: ``delete_store``)."""

    definition: StoreDefinition
    id: str
    expected: StoredState | None
    step_id: StoreStepId | None
    encoded_result: str | None

    #: The ledger records a deletion as this kind of operation.
    operation: LedgerOperation = "delete"


@dataclass(frozen=True, slots=True)
class CommitOutcome:
    """What a commit found: ``committed``, ``already-applied`` (with the ``recorded`` ledger
    text), ``step-mismatch`` (the step id recorded the ``recorded`` text of an operation of
    another kind), ``conflict`` (with the ``current`` row) or ``missing``."""

    status: Literal["committed", "already-applied", "step-mismatch", "conflict", "missing"]
    recorded: str | None = None
    current: StoredState | None = None


COMMITTED = CommitOutcome("committed")
MISSING = CommitOutcome("missing")


def already_applied(recorded: str) -> CommitOutcome:
    return CommitOutcome("already-applied", recorded=recorded)


def step_mismatch(recorded: str) -> CommitOutcome:
    return CommitOutcome("step-mismatch", recorded=recorded)


def recorded_outcome(
    recorded: str, recorded_operation: str | None, operation: LedgerOperation
) -> CommitOutcome:
    """The outcome of a commit that found ``recorded`` in the ledger under its step id:
    ``already-applied``, or ``step-mismatch`` when the row names another operation
    (``""`` or ``None``, a row older than the ``operation`` column, matches any)."""
    if recorded_operation and recorded_operation != operation:
        return step_mismatch(recorded)
    return already_applied(recorded)


def conflict(current: StoredState) -> CommitOutcome:
    return CommitOutcome("conflict", current=current)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often a CAS loop retries after losing a race, and how long it backs off.

    Before attempt ``n + 1`` it sleeps a uniformly random time up to
    ``min(max_delay, base_delay * 2 ** (n - 1))`` (full jitter).
    """

    max_attempts: int = 50
    base_delay: float = 0.001
    max_delay: float = 0.05
    #: After this many lost races an operation queues for the store (0: never).
    queue_after: int = 20

    def delay(self, attempt: int) -> float:
        return random.uniform(0, min(self.max_delay, self.base_delay * 2 ** min(attempt - 1, 30)))


@dataclass(frozen=True, slots=True)
class VersionCondition:
    """The store versions a conditional write accepts: one of ``versions``, pairs of
    (instance_id, version), or any version at all with ``any_version`` (``If-Match: *``).

    A missing store is created first and compared (``update_store_from``'s semantics),
    unless ``existing_only``: then it accepts nothing and is not created (the HTTP API's
    ``If-Match``), and its conflict names the instance ``""`` at version 0. With
    ``missing_only`` (``If-None-Match: *``) it is the other way round: only a missing store
    is accepted, an update creates it (the commit fails if another one did first) and a
    delete does nothing; an existing store is a conflict that expects the instance ``""``.
    """

    versions: tuple[tuple[str, StoreVersion], ...] = ()
    any_version: bool = False
    existing_only: bool = False
    missing_only: bool = False

    @classmethod
    def exactly(cls, instance_id: str, version: StoreVersion) -> VersionCondition:
        return cls(((instance_id, version),))

    def check(self) -> None:
        """Raise ``ValueError`` for a condition naming an empty instance id (the caller
        must read a fresh snapshot). A condition of no versions accepts none."""
        if any(not instance_id for instance_id, _ in self.versions):
            raise ValueError("Store snapshot is missing instance_id; read a fresh snapshot")

    def accepts(self, stored: StoredState) -> bool:
        """Whether the existing row ``stored`` satisfies the condition: a listed version
        is an ``int`` equal to the stored one, never a ``bool`` (``True == 1`` in Python,
        so a snapshot of ``version=True`` would otherwise pass for version 1) nor another
        number (``1.0``)."""
        if self.missing_only:
            return False
        return self.any_version or any(
            instance_id == stored.instance_id and _same_version(version, stored.version)
            for instance_id, version in self.versions
        )

    def _expected(self, stored: StoredState | None) -> tuple[str, StoreVersion]:
        # The conflict names the version asked for: the first one listed.
        if self.versions:
            return self.versions[0]
        if stored is None or self.missing_only:
            return (MISSING_INSTANCE, 0)
        return (stored.instance_id, stored.version)

    def update_conflict(self, stored: StoredState | None) -> StoreUpdateConflict:
        """The conflict over ``stored`` (``None``: a missing store, ``existing_only``)."""
        return StoreUpdateConflict(*_conflict_fields(self._expected(stored), stored))

    def delete_conflict(self, stored: StoredState | None) -> StoreDeleteConflict:
        """The conflict over ``stored`` (``None``: a missing store, ``existing_only``)."""
        return StoreDeleteConflict(*_conflict_fields(self._expected(stored), stored))


def _same_version(given: object, stored: StoreVersion) -> bool:
    """Whether a version a caller gave is the stored one: an ``int`` (a ``bool`` is not
    one, whatever Python's ``==`` says) of the same value."""
    return isinstance(given, int) and not isinstance(given, bool) and given == stored


def _conflict_fields(
    expected: tuple[str, StoreVersion], stored: StoredState | None
) -> tuple[str, str, StoreVersion, StoreVersion]:
    """(expected instance, actual instance, expected version, actual version)."""
    actual = (stored.instance_id, stored.version) if stored else (MISSING_INSTANCE, 0)
    return expected[0], actual[0], expected[1], actual[1]


#: The ``actual_instance_id`` of a conflict over a store that does not exist.
MISSING_INSTANCE = ""


class StoreWrite:
    """What ``update_store_if`` did: its ``result`` and the ``instance_id`` it committed
    to, or ``None`` when the result was replayed from the ledger (which does not record
    the instance of an update).

    A write this call committed (``StoreWrite.committed``) also holds the committed
    state's canonical text, ``encoded``, and its ``versions`` (previous, new): its
    ``result`` decodes the state from that text when first read, so a caller that answers
    with the text itself (the HTTP API) never holds the state as Python objects."""

    __slots__ = ("_result", "encoded", "instance_id", "versions")

    def __init__(self, result: StoreUpdateFromResult, instance_id: str | None) -> None:
        self._result: StoreUpdateFromResult | None = result
        self.instance_id = instance_id
        self.encoded: str | None = None
        self.versions: tuple[StoreVersion, StoreVersion] | None = None

    @classmethod
    def committed(
        cls, encoded: str, previous_version: StoreVersion, version: StoreVersion, instance_id: str
    ) -> StoreWrite:
        """The write this call committed: state ``encoded``, from and to those versions."""
        write = cls.__new__(cls)
        write._result = None
        write.instance_id = instance_id
        write.encoded = encoded
        write.versions = (previous_version, version)
        return write

    @property
    def result(self) -> StoreUpdateFromResult:
        if self._result is None:
            assert self.encoded is not None and self.versions is not None
            self._result = StoreUpdateResult(decode_durable(self.encoded), *self.versions)
        return self._result
