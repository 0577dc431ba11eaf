"""The limits and codes the tables and the protocol share, written once.

Key and id lengths are the column sizes of the tables (``models``) and what the store
client, the runtime and the API refuse before any SQL; ``WaiterKind`` is the ``kind`` of a
``WaiterPath`` row (the PL/pgSQL functions of migration ``0002`` spell the same numbers).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final

__all__ = [
    "MAX_CHANGED_PATH_DEPTH",
    "MAX_CHANGE_KEYS",
    "MAX_COHORT_LENGTH",
    "MAX_INSTANCE_ID_LENGTH",
    "MAX_KEY_LENGTH",
    "MAX_LEDGER_KEY_BYTES",
    "MAX_PATH_KEY_LENGTH",
    "MAX_VERSION",
    "WaiterKind",
]

#: Store names and ids, execution ids, step keys, workflow names.
MAX_KEY_LENGTH: Final = 255
#: A store instance id (a UUID in text, or an id the API was given).
MAX_INSTANCE_ID_LENGTH: Final = 64
#: A waiter's cohort (a digest in hex, ``core.cohorts``).
MAX_COHORT_LENGTH: Final = 64
#: The four keys of a store step together (store name, store id, execution id, step key),
#: in bytes of UTF-8: PostgreSQL's btree holds an index row of at most 2,704 bytes, and the
#: ledger's unique index holds the four (with their headers) uncompressed when they are
#: random text. Each may still be ``MAX_KEY_LENGTH`` characters.
MAX_LEDGER_KEY_BYTES: Final = 2600
#: The largest store version the tables hold (a PostgreSQL ``bigint``): a waiter's
#: ``since_version`` past it is refused before any SQL.
MAX_VERSION: Final = 2**63 - 1
#: Path keys longer than this are replaced by a digest, so any path fits a btree entry.
MAX_PATH_KEY_LENGTH: Final = 200
#: The most segments of a recorded changed path: a deeper change is recorded as its prefix
#: of this many (``core.changes``).
MAX_CHANGED_PATH_DEPTH: Final = 32
#: The most index keys the changed paths of one commit are looked up by (a path of n
#: segments costs n + 2); more are recorded at the deepest level that fits (``core.changes``).
MAX_CHANGE_KEYS: Final = 32_768


class WaiterKind(IntEnum):
    """How a ``WaiterPath`` row matches a changed path ``c`` (see ``core.waiter_index``)."""

    #: The key of a read path: woken by a change at it or below it.
    READ = 0
    #: The key of a non-empty proper prefix of a read path: woken by a change at it.
    PREFIX = 1
    #: Woken by every change (a waiter registered against another instance).
    ALWAYS = 2
