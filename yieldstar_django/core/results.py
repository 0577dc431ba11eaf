"""Value types of the store protocol: frozen dataclasses compared by value.

See ``docs/internals/architecture.md#stores`` and ``#ledger``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from .errors import StoreStepMismatchError
from .types import StorePath, StoreVersion


@dataclass(frozen=True)
class StoreStepId:
    """The workflow step making a store operation; keys the applied-steps ledger."""

    execution_id: str
    step_key: str


@dataclass(frozen=True)
class StoreSnapshot:
    """A store's state as of (``instance_id``, ``version``). ``state`` is the caller's copy."""

    state: Any
    instance_id: str
    version: StoreVersion


@dataclass(frozen=True)
class StoreUpdateResult:
    """A committed update: the new state and the version it moved from and to.

    The result of ``update_store``, and of ``update_store_from`` when it committed
    (``updated`` is always True, telling it apart from a ``StoreUpdateConflict``).
    """

    state: Any
    previous_version: StoreVersion
    version: StoreVersion
    updated: Literal[True] = field(default=True, init=False)


#: The former name of the committed branch of ``StoreUpdateFromResult``: one type, since
#: ``update_store`` and ``update_store_from`` commit the same result.
StoreUpdated = StoreUpdateResult


@dataclass(frozen=True)
class StoreUpdateConflict:
    """``update_store_from`` found the store changed since the snapshot; nothing changed."""

    expected_instance_id: str
    actual_instance_id: str
    expected_version: StoreVersion
    actual_version: StoreVersion
    updated: Literal[False] = field(default=False, init=False)


StoreUpdateFromResult: TypeAlias = StoreUpdated | StoreUpdateConflict


@dataclass(frozen=True)
class StoreDeleted:
    """``delete_store_from`` deleted the store (``deleted`` is True)."""

    deleted: Literal[True] = field(default=True, init=False)


@dataclass(frozen=True)
class StoreDeleteConflict:
    """``delete_store_from`` found the store changed since the snapshot; nothing changed."""

    expected_instance_id: str
    actual_instance_id: str
    expected_version: StoreVersion
    actual_version: StoreVersion
    deleted: Literal[False] = field(default=False, init=False)
    reason: Literal["conflict"] = field(default="conflict", init=False)


StoreDeleteFromResult: TypeAlias = StoreDeleted | StoreDeleteConflict


@dataclass(frozen=True)
class StoreTakeMatched:
    """A take whose selector matched; the claim committed at ``version``."""

    selected: Any
    instance_id: str
    version: StoreVersion
    matched: Literal[True] = field(default=True, init=False)


@dataclass(frozen=True)
class StoreTakeUnmatched:
    """A take whose selector did not match; nothing was claimed or recorded.

    ``version`` and ``read_paths`` are what a waiter registers with.
    """

    instance_id: str
    version: StoreVersion
    read_paths: tuple[StorePath, ...]
    matched: Literal[False] = field(default=False, init=False)


StoreTakeResult: TypeAlias = StoreTakeMatched | StoreTakeUnmatched


@dataclass(frozen=True)
class StoreWaiter:
    """A versioned read observation: wake ``execution_id`` when a change touches
    ``read_paths`` of the store after (``instance_id``, ``since_version``).

    ``cohort``: waiters of one store with the same cohort wait on the same function of
    its state (:mod:`yieldstar_django.core.cohorts`); a change wakes the first of them in
    registration order, not all (``None``: woken alone, as every waiter it touches is).
    """

    workflow_id: str
    execution_id: str
    step_key: str
    store_name: str
    store_id: str
    instance_id: str
    since_version: StoreVersion
    read_paths: tuple[StorePath, ...]
    cohort: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "read_paths", tuple(tuple(path) for path in self.read_paths))


@dataclass(frozen=True)
class Wake:
    """A request to resume an execution. It carries no copy of the event.

    ``takeover``: the wake is a lease's takeover timer (the execution's worker stopped
    renewing its lease); a wake backend hands it over before ordinary wakes (the Celery
    backend sends it with the highest priority), so a rescue does not queue behind work.
    """

    execution_id: str
    workflow_id: str
    takeover: bool = False


RecordedResult: TypeAlias = StoreUpdateResult | StoreTakeMatched | StoreDeleted

#: The kind of operation a ledger row records. A step id replayed by an operation of another
#: kind raises ``StoreStepMismatchError``; ``update_store`` and ``update_store_from`` are one
#: kind (they record the same result).
LedgerOperation: TypeAlias = Literal["update", "take", "delete"]
LEDGER_OPERATIONS: tuple[LedgerOperation, ...] = ("update", "take", "delete")

_RECORD_OPERATIONS: dict[str, LedgerOperation] = {
    "update": "update",
    "update_from": "update",
    "take": "take",
    "delete": "delete",
}


# The ledger holds a committed result as canonical JSON. The builders splice in texts that
# are already canonical (a state or a selection, encoded once), so a large state is not
# encoded again; keys are written in sorted order to keep the text canonical.

DELETE_RECORD = '{"kind":"delete"}'


def update_record(kind: str, encoded_state: str, previous_version: int, version: int) -> str:
    """The ledger text of a ``StoreUpdateResult``; ``kind`` is ``"update"`` or
    ``"update_from"`` (which call recorded it; both replay as the same result)."""
    return (
        f'{{"kind":"{kind}","previous_version":{previous_version},'
        f'"state":{encoded_state},"version":{version}}}'
    )


def take_record(instance_id: str, encoded_selected: str, version: int) -> str:
    """The ledger text of a matched take (``StoreTakeMatched``)."""
    return (
        f'{{"instance_id":{json.dumps(instance_id)},"kind":"take",'
        f'"selected":{encoded_selected},"version":{version}}}'
    )


def record_operation(record: dict[str, Any]) -> LedgerOperation:
    """The operation kind of a decoded ledger text (rows older than the ``operation``
    column carry it in their ``kind``)."""
    kind = record.get("kind")
    operation = _RECORD_OPERATIONS.get(kind) if isinstance(kind, str) else None
    if operation is None:
        raise ValueError(f"unknown ledger record kind {kind!r}")
    return operation


def result_from_record(record: dict[str, Any]) -> RecordedResult:
    """Rebuild the typed result from its decoded ledger text (see the builders above)."""
    operation = record_operation(record)
    if operation == "update":
        return StoreUpdateResult(record["state"], record["previous_version"], record["version"])
    if operation == "take":
        return StoreTakeMatched(record["selected"], record["instance_id"], record["version"])
    return StoreDeleted()


def update_from_record(record: dict[str, Any], step_id: StoreStepId) -> StoreUpdateResult:
    """The recorded result of an update step; ``StoreStepMismatchError`` if ``step_id``
    recorded another kind of operation."""
    result = result_from_record(record)
    if not isinstance(result, StoreUpdateResult):
        raise StoreStepMismatchError(step_id, record_operation(record), "update")
    return result


def take_from_record(record: dict[str, Any], step_id: StoreStepId) -> StoreTakeMatched:
    """The recorded result of a take step; ``StoreStepMismatchError`` otherwise."""
    result = result_from_record(record)
    if not isinstance(result, StoreTakeMatched):
        raise StoreStepMismatchError(step_id, record_operation(record), "take")
    return result


def delete_from_record(record: dict[str, Any], step_id: StoreStepId) -> StoreDeleted:
    """The recorded result of a delete step; ``StoreStepMismatchError`` otherwise."""
    result = result_from_record(record)
    if not isinstance(result, StoreDeleted):
        raise StoreStepMismatchError(step_id, record_operation(record), "delete")
    return result


__all__ = [
    "DELETE_RECORD",
    "LEDGER_OPERATIONS",
    "LedgerOperation",
    "RecordedResult",
    "StoreDeleteConflict",
    "StoreDeleteFromResult",
    "StoreDeleted",
    "StoreSnapshot",
    "StoreStepId",
    "StoreTakeMatched",
    "StoreTakeResult",
    "StoreTakeUnmatched",
    "StoreUpdateConflict",
    "StoreUpdateFromResult",
    "StoreUpdateResult",
    "StoreUpdated",
    "StoreWaiter",
    "Wake",
    "delete_from_record",
    "record_operation",
    "result_from_record",
    "take_from_record",
    "take_record",
    "update_from_record",
    "update_record",
]
