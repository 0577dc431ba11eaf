"""Waiters written in bulk, for the benchmark and the waiter-index tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def insert_waiters(
    execute: Callable[[str, list[Any]], Any],
    store_pk: int,
    instance_id: str,
    count: int,
    prefix: str = "e",
) -> None:
    """Waiter ``<prefix><i>`` (``i`` < ``count``) reads ``("jobs", i, "status")``, indexed
    as ``register_waiter`` indexes it (a READ row, and PREFIX rows for ``("jobs",)`` and
    ``("jobs", i)``). ``execute(sql, params)`` runs a statement (a cursor's or a psycopg
    connection's); PostgreSQL or SQLite. No ``ANALYZE``."""
    numbers = (
        f"WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {count - 1})"
    )
    execute(
        f"{numbers} INSERT INTO yieldstar_waiter (workflow_id, execution_id, step_key, "
        "store_pk, instance_id, since_version, read_paths, created_at) "
        "SELECT 'wf', CAST(%s AS TEXT) || i, 'take', %s, %s, 0, "
        "'[[\"jobs\",' || i || ',\"status\"]]', CURRENT_TIMESTAMP FROM n",
        [prefix, store_pk, instance_id],
    )
    number = f"substr(execution_id, {len(prefix) + 1})"
    for kind, path in [
        (0, f"'[\"jobs\",' || {number} || ',\"status\"]'"),
        (1, f"'[\"jobs\",' || {number} || ']'"),
        (1, "'[\"jobs\"]'"),
    ]:
        execute(
            "INSERT INTO yieldstar_waiterpath (waiter_id, store_pk, kind, path) "
            f"SELECT id, store_pk, {kind}, {path} FROM yieldstar_waiter WHERE store_pk = %s",
            [store_pk],
        )
