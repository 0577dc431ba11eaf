"""Planner statistics of the app's tables after a burst (PostgreSQL): the relay's upkeep.

A worker keeps its connection and, with ``OPTIONS["prepare_threshold"]``, the generic
plans of its statements, which PostgreSQL makes from the statistics of the tables they
read and keeps until the next ``ANALYZE`` of one of them. Plans made while the tables were
small scan them in full, so after a burst (a fan-out starting thousands of executions)
every resume scans the grown tables until autovacuum analyzes them: a minute or more, and
never with autovacuum off. :func:`analyze_grown_tables` analyzes each table of the app
whose rows changed since its last ``ANALYZE`` outnumber ``GROWTH_ROWS`` plus the rows it
had then; the ``ANALYZE`` invalidates those plans in every session.
"""

from __future__ import annotations

import logging
from functools import cache

from django.apps import apps
from django.db import connections

from .sql import queries

__all__ = ["GROWTH_ROWS", "analyze_grown_tables"]

logger = logging.getLogger("yieldstar_django.analyze")

#: Rows changed since a table's last ``ANALYZE``, beyond the rows it had then, after which
#: the relay analyzes it.
GROWTH_ROWS = 1_000


@cache
def _tables() -> list[str]:
    """The app's tables (its models are fixed once the app registry is ready)."""
    return [model._meta.db_table for model in apps.get_app_config("yieldstar").get_models()]


def analyze_grown_tables(using: str) -> list[str]:
    """``ANALYZE`` the app's tables on ``using`` that grew past their statistics (see the
    module docstring), skipping any another process holds (autovacuum); return the names
    of those that grew. One catalog query when none did; nothing on databases other than
    PostgreSQL. Outside a transaction, as the relay runs it."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return []
    with connection.cursor() as cursor:
        cursor.execute(queries.of(connection).grown_tables, [_tables(), GROWTH_ROWS])
        grown = [str(row[0]) for row in cursor.fetchall()]
        for name in grown:
            # SKIP_LOCKED: a table autovacuum is working on is left to it, never waited for.
            table = connection.ops.quote_name(name)
            cursor.execute(queries.of(connection).analyze_table.format(table=table))
    if grown:
        logger.info("analyzed %s: their rows outgrew their statistics", ", ".join(grown))
    return grown
