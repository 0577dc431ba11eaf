"""The keys a store call is given, checked alike by every client before anything runs:
what the tables cannot hold (a key too long or unstorable, or a store step whose four keys
are too long together for the ledger's index) is refused with a ``TypeError`` or
``ValueError``, before any user code or SQL, and nothing is written
(``tests/core/conformance/test_keys.py``)."""

from __future__ import annotations

import re
from typing import Final

from .constants import MAX_INSTANCE_ID_LENGTH, MAX_KEY_LENGTH, MAX_LEDGER_KEY_BYTES
from .results import StoreStepId, StoreWaiter

__all__ = [
    "check_ledger_key",
    "check_removal",
    "check_step",
    "check_store",
    "check_text",
    "check_waiter",
]

_UNSTORABLE: Final = re.compile("[\x00\ud800-\udfff]")


def check_text(label: str, value: object, max_length: int = MAX_KEY_LENGTH) -> None:
    """Refuse a key the tables cannot hold: not a ``str``, too long, or holding ``\\x00``
    or a lone surrogate."""
    if not isinstance(value, str):
        raise TypeError(f"{label} must be a str, not {type(value).__name__}")
    if len(value) > max_length:
        raise ValueError(f"{label} is longer than {max_length} characters")
    if _UNSTORABLE.search(value):
        raise ValueError(f'{label} cannot hold "\\x00" or lone surrogates')


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
        raise ValueError(
            "a store step's store name, store id, execution id and step key are longer "
            f"than {MAX_LEDGER_KEY_BYTES} bytes of UTF-8 together"
        )


def check_waiter(waiter: StoreWaiter) -> None:
    """Check a waiter's identifying texts."""
    check_store(waiter.store_name, waiter.store_id)
    check_text("workflow id", waiter.workflow_id)
    check_text("execution id", waiter.execution_id)
    check_text("step key", waiter.step_key)
    check_text("instance id", waiter.instance_id, MAX_INSTANCE_ID_LENGTH)


def check_removal(execution_id: str, step_key: str | None) -> None:
    """Check the keys of a removal of waiters (an execution's, or one of its steps')."""
    check_text("execution id", execution_id)
    if step_key is not None:
        check_text("step key", step_key)
