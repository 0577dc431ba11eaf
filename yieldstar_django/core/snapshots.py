"""``SnapshotCache``: the last committed row a client saw of each store, so that an
uncontended write can commit from it in one round trip (:mod:`.cas`).

An entry is only ever a row that was committed: ``(instance_id, version)`` names one state
for good, so an entry can be old but never wrong, and committing from an old entry only
loses the compare-and-swap (the commit then reports the current row). Bounded: at most
``capacity`` stores, least recently used first out, and no row whose encoding is longer
than ``max_chars``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from .commits import StoredState

__all__ = ["DEFAULT_CAPACITY", "MAX_CACHED_CHARS", "SnapshotCache"]

#: Stores a client remembers by default (``SNAPSHOT_CACHE_SIZE``).
DEFAULT_CAPACITY = 1024

#: A row whose canonical text is longer is not remembered (bounds the memory to about
#: ``capacity * MAX_CACHED_CHARS`` characters).
MAX_CACHED_CHARS = 64 * 1024


class SnapshotCache:
    """(store name, store id) -> the last committed ``StoredState`` seen. Thread-safe."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY, max_chars: int = MAX_CACHED_CHARS):
        self.capacity = capacity
        self.max_chars = max_chars
        self._rows: OrderedDict[tuple[str, str], StoredState] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, name: str, id: str) -> StoredState | None:
        with self._lock:
            row = self._rows.get((name, id))
            if row is not None:
                self._rows.move_to_end((name, id))
            return row

    def put(self, name: str, id: str, row: StoredState) -> None:
        """Remember ``row`` unless an entry of the same instance is newer (a slower
        thread must not put an older version back) or the row is too long to keep."""
        key = (name, id)
        with self._lock:
            if self.capacity <= 0 or len(row.encoded) > self.max_chars:
                self._rows.pop(key, None)
                return
            known = self._rows.get(key)
            if (
                known is not None
                and known.instance_id == row.instance_id
                and known.version > row.version
            ):
                return
            self._rows[key] = row
            self._rows.move_to_end(key)
            while len(self._rows) > self.capacity:
                self._rows.popitem(last=False)

    def forget(self, name: str, id: str) -> None:
        with self._lock:
            self._rows.pop((name, id), None)

    def __len__(self) -> int:
        return len(self._rows)
