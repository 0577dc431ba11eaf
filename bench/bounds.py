"""Bounds: a change's cost follows its size, not its depth.

The same N leaves changed at depth D and at depth 2, through ``MemoryStoreClient.update_store``
(replacement: the diff; in place: the draft's writes) plus the index keys of the wake lookup
(``path_match``) and the version row's paths (``paths_json``), which the database clients
compute in the commit; then the worst body the API admits (7.9 MB of chains 250 lists deep,
changed at the bottom of each). Time and tracemalloc's peak, the deep shape against the flat.
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from yieldstar_django.connector.arguments import paths_json
from yieldstar_django.core.definition import StoreDefinition
from yieldstar_django.core.durable import decode_durable
from yieldstar_django.core.memory import MemoryStoreClient
from yieldstar_django.core.waiter_index import path_match

from .table import Row


def _shape(depth: int, n: int, leaf: int) -> Any:
    value: Any = [leaf] * n
    for _ in range(depth - 2):
        value = [value]
    return {"v": value}


def _leaves(draft: Any, depth: int) -> Any:
    node = draft["v"]
    for _ in range(depth - 2):
        node = node[0]
    return node


def _commit(state: Any, updater: Callable[[Any], Any]) -> tuple[float, int]:
    """Seconds (untraced) and peak bytes (a second run, under tracemalloc, which slows
    allocation several times over) of one update from ``state`` and its wake lookup's
    keys."""
    definition = StoreDefinition("bench-bounds", None, lambda id: state)
    measured = []
    for traced in (False, True):
        client = MemoryStoreClient()
        client.get_store(definition, "s")
        if traced:
            tracemalloc.start()
        started = time.perf_counter()
        try:
            client.update_store(definition, "s", updater=updater)
            changed = client.versions[-1].changed_paths
            path_match(changed)
            paths_json(changed)
            measured.append(
                tracemalloc.get_traced_memory()[1] if traced else time.perf_counter() - started
            )
        finally:
            if traced:
                tracemalloc.stop()
    return measured[0], int(measured[1])


def _replace(depth: int, n: int) -> tuple[float, int]:
    return _commit(_shape(depth, n, 0), lambda draft: _shape(depth, n, 1))


def _in_place(depth: int, n: int) -> tuple[float, int]:
    def updater(draft: Any) -> None:
        leaves = _leaves(draft, depth)
        for index in range(n):
            leaves[index] = 1

    return _commit(_shape(depth, n, 0), updater)


def _chains(depth: int) -> str:
    return "[" + ",".join(["[" * depth + "]" * depth] * 15_800) + "]"


def _worst_body() -> tuple[float, int, int, float]:
    """The second of two replacements by 7.9 MB bodies: seconds, peak bytes, body bytes,
    and seconds to decode the body alone."""
    first, second = _chains(250), _chains(249)
    state = decode_durable(first)
    t, peak = _commit(state, lambda draft: decode_durable(second))
    started = time.perf_counter()
    decode_durable(second)
    return t, peak, len(second), time.perf_counter() - started


def _decoded_peak(text: str) -> int:
    """Peak bytes of decoding ``text`` alone: what any handling of the body starts with."""
    tracemalloc.start()
    try:
        decode_durable(text)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def run(quick: bool = False) -> list[Row]:
    n, deep = (2_000, 200) if quick else (10_000, 250)
    rows = []
    for name, measure in (("replaced (diff)", _replace), ("in place (draft)", _in_place)):
        t_flat, m_flat = measure(2, n)
        t_deep, m_deep = measure(deep, n)
        rows.append(
            Row(
                "bounds",
                f"{n:,} leaves at depth {deep}, {name}",
                t_deep * 1e3,
                "same at depth 2",
                t_flat * 1e3,
                "ms",
                note=f"peak {m_deep / 1e6:.1f} MB vs {m_flat / 1e6:.1f} MB "
                f"({m_deep / m_flat:.2f}x); time {t_deep / t_flat:.2f}x",
            )
        )
    t, peak, size, t_decode = _worst_body()
    decoded = _decoded_peak(_chains(249))
    rows.append(
        Row(
            "bounds",
            "7.9 MB of 250-deep chains, all changed",
            t * 1e3,
            "decoding the body alone",
            t_decode * 1e3,
            "ms",
            note=f"peak {peak / 1e6:.0f} MB = {peak / size:.1f}x the body, "
            f"{peak / decoded:.1f}x decoding it alone",
        )
    )
    return rows
