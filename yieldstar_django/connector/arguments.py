"""Checks of the keys a store call is given, before any SQL: what the tables cannot hold is
refused with a ``TypeError`` or ``ValueError`` and nothing is written."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Final

from ..core.constants import MAX_KEY_LENGTH
from ..core.results import StoreStepId
from ..core.types import StorePath

__all__ = ["check_step", "check_store", "check_text", "paths_json"]

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


def paths_json(paths: Iterable[StorePath]) -> str:
    """Paths as the compact JSON text the version and waiter rows store."""
    return json.dumps([list(p) for p in paths], ensure_ascii=True, separators=(",", ":"))
