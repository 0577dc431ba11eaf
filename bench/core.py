"""Core: the cost of an update that changes one field, tracked paths against the diff fallback.

The state holds a list of N items. The tracked update mutates the draft (paths recorded in
O(changes), only written subtrees re-checked); the fallback returns a replacement, which
forces the O(state) structural diff and a full durability check. Both run through
``MemoryStoreClient.update_store`` (decode, draft, validate, encode, commit); the path
computation alone is timed too.
"""

from __future__ import annotations

from typing import Any

from yieldstar_django.core.definition import StoreDefinition
from yieldstar_django.core.drafts import WriteLog, build_draft
from yieldstar_django.core.durable import decode_durable, encode_durable
from yieldstar_django.core.memory import MemoryStoreClient
from yieldstar_django.core.paths import diff_paths

from .table import Row, best_of


def _state(n: int) -> dict[str, Any]:
    return {"count": 0, "items": [{"id": i, "done": False, "tag": f"t{i % 7}"} for i in range(n)]}


def _measure(n: int, repeat: int) -> list[Row]:
    state = _state(n)
    definition = StoreDefinition(f"bench-core-{n}", None, lambda id: state)
    client = MemoryStoreClient()
    client.get_store(definition, "s")

    def tracked() -> None:
        client.update_store(definition, "s", updater=lambda d: d.update(count=d["count"] + 1))

    def replaced() -> None:
        client.update_store(definition, "s", updater=lambda d: {**d, "count": d["count"] + 1})

    t_tracked = best_of(tracked, repeat=repeat)
    t_replaced = best_of(replaced, repeat=repeat)

    encoded = encode_durable(state)
    previous = decode_durable(encoded)
    log = WriteLog()
    draft = build_draft(decode_durable(encoded), log)
    draft["count"] = 1
    t_paths = best_of(log.paths, repeat=repeat, number=100)
    t_diff = best_of(lambda: diff_paths(previous, draft), repeat=repeat)
    t_draft = best_of(lambda: build_draft(decode_durable(encoded), WriteLog()), repeat=repeat)
    return [
        Row(
            "core",
            f"update one field, {n:,} items (tracked)",
            t_tracked * 1e3,
            "same update via diff fallback",
            t_replaced * 1e3,
            "ms",
            note="whole update_store on MemoryStoreClient",
        ),
        Row(
            "core",
            f"changed paths alone, {n:,} items (tracked)",
            t_paths * 1e6,
            "structural diff",
            t_diff * 1e6,
            "us",
            note=f"decoding + building the draft: {t_draft * 1e3:.2f} ms",
        ),
    ]


def run(quick: bool = False) -> list[Row]:
    repeat = 3 if quick else 7
    return [row for n in (1_000, 100_000) for row in _measure(n, repeat)]
