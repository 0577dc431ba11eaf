"""The store client's statements whose text depends on their arguments: the lookups of
the waiters a change intersects, one index probe per path key. Every other statement is a
named entry of ``yieldstar_django/sql/queries.sql``; these are built from its
``store_waiters``, ``probed_waiters``, ``waiter_probe`` and ``waiter_path_probe``.
"""

from __future__ import annotations

import functools
from typing import Any, Final

from ..core.constants import WaiterKind
from ..core.waiter_index import PathMatch
from ..sql import queries

__all__ = ["PROBES_PER_STATEMENT", "matching_waiters_sql", "matching_waiters_statements"]


#: Index probes (``UNION ALL`` branches) per matching statement: SQLite refuses a compound
#: ``SELECT`` of more than 500 terms (``SQLITE_MAX_COMPOUND_SELECT``), and PostgreSQL parses
#: a chain of branches recursively (some thousands exceed ``max_stack_depth``).
PROBES_PER_STATEMENT: Final = 250


def matching_waiters_sql(
    store_pk: int, match: PathMatch, *, always: bool = True
) -> tuple[str, list[Any]]:
    """The portable query for the waiters a change intersects: ``(id, execution_id,
    workflow_id, woken_at, cohort)`` rows in registration order.

    Every lookup of a path row is an equality on all three columns of the
    ``(store_pk, kind, path)`` index, one key per ``UNION ALL`` branch (never ``IN (...)``,
    which a planner with stale statistics may check as a filter over every row of a kind),
    so any plan of it is an index probe whatever the statistics say. ``always``: with the
    branch of the ``ALWAYS`` rows. A change of many paths is looked up in several
    statements, :func:`matching_waiters_statements`."""
    if match.wake_all:
        return queries.of().store_waiters, [store_pk]
    probe_always, probe_read, probe_prefix = _probes()
    parts = [probe_always] if always else []
    params: list[Any] = [store_pk] if always else []
    for probe, keys in ((probe_read, match.read_keys), (probe_prefix, match.prefix_keys)):
        for key in keys:
            parts.append(probe)
            params += [store_pk, key]
    return queries.of().probed_waiters.format(probes=" UNION ALL ".join(parts)), params


@functools.cache
def _probes() -> tuple[str, str, str]:
    """The probes of the ``ALWAYS`` rows, and of a ``READ`` and a ``PREFIX`` key (built
    once)."""
    return (
        queries.of().waiter_probe.format(kind=int(WaiterKind.ALWAYS)),
        queries.of().waiter_path_probe.format(kind=int(WaiterKind.READ)),
        queries.of().waiter_path_probe.format(kind=int(WaiterKind.PREFIX)),
    )


def matching_waiters_statements(
    store_pk: int, match: PathMatch, probes: int = PROBES_PER_STATEMENT
) -> list[tuple[str, list[Any]]]:
    """``matching_waiters_sql`` split into statements of at most ``probes`` branches each
    (the ``ALWAYS`` one in the first): together they return every waiter the change
    intersects, a waiter found by several of them once per statement that found it."""
    if match.wake_all:
        return [matching_waiters_sql(store_pk, match)]
    keys = [(WaiterKind.READ, key) for key in match.read_keys]
    keys += [(WaiterKind.PREFIX, key) for key in match.prefix_keys]
    statements = []
    start, size = 0, probes - 1  # the first statement probes the ALWAYS rows too
    while True:
        chunk = keys[start : start + size]
        part = PathMatch(
            False,
            [key for kind, key in chunk if kind == WaiterKind.READ],
            [key for kind, key in chunk if kind == WaiterKind.PREFIX],
        )
        statements.append(matching_waiters_sql(store_pk, part, always=start == 0))
        start += size
        if start >= len(keys):
            return statements
        size = probes
