"""Paths as the compact JSON text the version and waiter rows store. (The checks of the
keys a call is given, before any SQL, are every client's: :mod:`..core.keys`.)"""

from __future__ import annotations

import json
from collections.abc import Iterable

from ..core.types import StorePath

__all__ = ["paths_json"]


def paths_json(paths: Iterable[StorePath]) -> str:
    """Paths as the compact JSON text the version and waiter rows store."""
    return json.dumps([list(p) for p in paths], ensure_ascii=True, separators=(",", ":"))
