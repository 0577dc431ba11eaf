"""The keys a store call is given, checked alike by every client before anything runs:
what the tables cannot hold (a key too long or unstorable, a store step whose four keys
are too long together for the ledger's index, a waiter's version past a ``bigint``) is
refused with a ``StoreKeyError`` naming the rule it breaks, before any user code or SQL,
and nothing is written (``tests/core/conformance/test_keys.py``)."""

from __future__ import annotations

import re
from typing import Final

from .constants import (
    MAX_COHORT_LENGTH,
    MAX_INSTANCE_ID_LENGTH,
    MAX_KEY_LENGTH,
    MAX_LEDGER_KEY_BYTES,
    MAX_VERSION,
)
from .errors import StoreKeyError, StoreKeyTypeError
from .results import StoreStepId, StoreWaiter

__all__ = [
    "check_ledger_key",
    "check_removal",
    "check_step",
    "check_store",
    "check_text",
    "check_version",
    "check_waiter",
]

_UNSTORABLE: Final = re.compile("[\x00\ud800-\udfff]")
#: What a key holding ``\\x00`` or a lone surrogate is told, by ``StoreKeyError.limit``.
_UNSTORABLE_MESSAGES: Final = {
    "nul": 'cannot hold "\\x00" (PostgreSQL text cannot)',
    "surrogate": "cannot hold a lone surrogate (UTF-8 cannot encode one)",
}


def check_text(
    label: str, value: object, max_length: int = MAX_KEY_LENGTH, *, empty: bool = True
) -> None:
    """Refuse a key the tables cannot hold with a ``StoreKeyError``: not a ``str``
    (``StoreKeyTypeError``), empty (unless ``empty``), longer than ``max_length``, or
    holding ``\\x00`` or a lone surrogate."""
    if not isinstance(value, str):
        raise StoreKeyTypeError(label, "type", f"must be a str, not {type(value).__name__}")
    if not value and not empty:
        raise StoreKeyError(label, "empty", "must not be empty")
    if len(value) > max_length:
        raise StoreKeyError(label, "length", f"is longer than {max_length} characters", max_length)
    found = _UNSTORABLE.search(value)
    if found:
        limit = "nul" if found.group() == "\x00" else "surrogate"
        raise StoreKeyError(label, limit, _UNSTORABLE_MESSAGES[limit])


def check_version(label: str, value: object) -> None:
    """Refuse a version a ``bigint`` column cannot hold with a ``StoreKeyError``: not an
    ``int`` or a ``bool`` (``StoreKeyTypeError``), or out of ``0..MAX_VERSION``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise StoreKeyTypeError(label, "type", f"must be an int, not {type(value).__name__}")
    if not 0 <= value <= MAX_VERSION:
        # (an int of thousands of digits has no str(): name its size instead)
        shown = str(value) if abs(value) <= 10**30 else f"an int of {value.bit_length()} bits"
        raise StoreKeyError(
            label, "range", f"must be from 0 to {MAX_VERSION}, not {shown}", MAX_VERSION
        )


def check_store(name: str, id: str) -> None:
    """Check a store's name and id."""
    check_text("store name", name)
    check_text("store id", id)


def check_step(step_id: StoreStepId | None) -> None:
    """Check a step id's execution id and step key (``None`` passes)."""
    if step_id is not None:
        check_text("step execution id", step_id.execution_id)
        check_text("step key", step_id.step_key)


def check_ledger_key(name: str, id: str, step_id: StoreStepId | None) -> None:
    """Check a store's name and id and a step id (``None`` passes) made on it, and that the
    four together fit the ledger's key: at most ``MAX_LEDGER_KEY_BYTES`` bytes of UTF-8."""
    check_store(name, id)
    check_step(step_id)
    if step_id is None:
        return
    keys = (name, id, step_id.execution_id, step_id.step_key)
    if sum(map(len, keys)) * 4 <= MAX_LEDGER_KEY_BYTES:
        return
    if sum(len(key.encode("utf-8")) for key in keys) > MAX_LEDGER_KEY_BYTES:
        raise StoreKeyError(
            "store step",
            "ledger",
            "keys (store name, store id, execution id and step key) are longer than "
            f"{MAX_LEDGER_KEY_BYTES} bytes of UTF-8 together",
            MAX_LEDGER_KEY_BYTES,
        )


def check_waiter(waiter: StoreWaiter) -> None:
    """Check a waiter's identifying texts and its ``since_version``."""
    check_store(waiter.store_name, waiter.store_id)
    check_text("workflow id", waiter.workflow_id)
    check_text("execution id", waiter.execution_id)
    check_text("step key", waiter.step_key)
    check_text("instance id", waiter.instance_id, MAX_INSTANCE_ID_LENGTH)
    check_version("since_version", waiter.since_version)
    if waiter.cohort is not None:
        check_text("cohort", waiter.cohort, MAX_COHORT_LENGTH, empty=False)


def check_removal(execution_id: str, step_key: str | None) -> None:
    """Check the keys of a removal of waiters (an execution's, or one of its steps')."""
    check_text("execution id", execution_id)
    if step_key is not None:
        check_text("step key", step_key)
