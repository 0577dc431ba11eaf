"""Value types of the store protocol (design §2): frozen dataclasses compared by value."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

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
    """A committed update: the new state and the version it moved from and to."""

    state: Any
    previous_version: StoreVersion
    version: StoreVersion


@dataclass(frozen=True)
class StoreUpdated:
    """``update_store_from`` committed (``updated`` is True)."""

    state: Any
    previous_version: StoreVersion
    version: StoreVersion
    updated: Literal[True] = field(default=True, init=False)


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
    ``read_paths`` of the store after (``instance_id``, ``since_version``)."""

    workflow_id: str
    execution_id: str
    step_key: str
    store_name: str
    store_id: str
    instance_id: str
    since_version: StoreVersion
    read_paths: tuple[StorePath, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "read_paths", tuple(tuple(path) for path in self.read_paths))


@dataclass(frozen=True)
class Wake:
    """A request to resume an execution. It carries no copy of the event."""

    execution_id: str
    workflow_id: str


RecordedResult: TypeAlias = StoreUpdateResult | StoreUpdated | StoreTakeMatched | StoreDeleted


# The ledger holds a committed result as canonical JSON. The builders splice in texts that
# are already canonical (a state or a selection, encoded once), so a large state is not
# encoded again; keys are written in sorted order to keep the text canonical.

DELETE_RECORD = '{"kind":"delete"}'


def update_record(kind: str, encoded_state: str, previous_version: int, version: int) -> str:
    """The ledger text of an ``update`` (``StoreUpdateResult``) or ``update_from``
    (``StoreUpdated``) result."""
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


def result_from_record(record: dict[str, Any]) -> RecordedResult:
    """Rebuild the typed result from its decoded ledger text (see the builders above)."""
    kind = record["kind"]
    if kind == "update":
        return StoreUpdateResult(record["state"], record["previous_version"], record["version"])
    if kind == "update_from":
        return StoreUpdated(record["state"], record["previous_version"], record["version"])
    if kind == "take":
        return StoreTakeMatched(record["selected"], record["instance_id"], record["version"])
    if kind == "delete":
        return StoreDeleted()
    raise ValueError(f"unknown ledger record kind {kind!r}")


__all__ = [
    "DELETE_RECORD",
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
    "result_from_record",
    "take_record",
    "update_record",
]
