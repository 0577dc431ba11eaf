"""Every SQL statement of the store client, written once.

Placeholders are ``%s`` (Django's paramstyle, both databases). ``{lock}`` slots take
``lock(...)`` of the connection: a row lock clause on PostgreSQL, nothing on SQLite, whose
``BEGIN IMMEDIATE`` transactions hold the database write lock from their first statement.
The PostgreSQL functions the commit calls are in ``yieldstar_django/sql/``.
"""

from __future__ import annotations

from typing import Any, Final

from ..core.constants import WaiterKind
from ..core.waiter_index import PathMatch

STORE_TABLE: Final = "yieldstar_storeinstance"
VERSION_TABLE: Final = "yieldstar_storeversion"
LEDGER_TABLE: Final = "yieldstar_appliedstep"
WAITER_TABLE: Final = "yieldstar_waiter"
WAITER_PATH_TABLE: Final = "yieldstar_waiterpath"
#: The runtime's executions: a fenced registration checks its run's lease there.
EXECUTION_TABLE: Final = "yieldstar_execution"

# --- reads -------------------------------------------------------------------------------

READ_STORE: Final = (
    f"SELECT instance_id, version, state FROM {STORE_TABLE} WHERE name = %s AND store_id = %s"
)
#: The store row by key, with its pk; ``{lock}`` may lock it.
READ_STORE_ROW: Final = (
    f"SELECT id, instance_id, version, state FROM {STORE_TABLE} "
    "WHERE name = %s AND store_id = %s{lock}"
)
#: The store row's pk and (instance_id, version), unlocked: the comparison before a lock.
PEEK_STORE_VERSION: Final = (
    f"SELECT id, instance_id, version FROM {STORE_TABLE} WHERE name = %s AND store_id = %s"
)
#: A step's recorded result and the kind of operation that recorded it (NULL: unknown).
LEDGER_LOOKUP: Final = (
    f"SELECT result, operation FROM {LEDGER_TABLE} WHERE store_name = %s AND store_id = %s "
    "AND execution_id = %s AND step_key = %s"
)
#: The ledger lookup and the store read at once: exactly one row (NULLs where missing).
READ_STORE_AND_STEP: Final = (
    f"SELECT l.result, s.instance_id, s.version, s.state FROM (SELECT 1 AS one) k "
    f"LEFT JOIN {LEDGER_TABLE} l ON l.store_name = %s AND l.store_id = %s "
    "AND l.execution_id = %s AND l.step_key = %s "
    f"LEFT JOIN {STORE_TABLE} s ON s.name = %s AND s.store_id = %s"
)
#: Ids of one store name in code-point order (``{collate}``: ``COLLATE "C"`` on PostgreSQL).
LIST_STORE_IDS: Final = (
    f"SELECT store_id FROM {STORE_TABLE} WHERE name = %s ORDER BY store_id{{collate}}"
)

# --- the commit as statements (SQLite; PostgreSQL with use_functions=False) --------------

INSERT_STORE: Final = (
    f"INSERT INTO {STORE_TABLE} "
    "(name, store_id, instance_id, version, state, created_at, updated_at) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (name, store_id) DO NOTHING RETURNING id"
)
UPDATE_STORE: Final = (
    f"UPDATE {STORE_TABLE} SET version = %s, state = %s, updated_at = %s WHERE id = %s"
)
DELETE_STORE: Final = f"DELETE FROM {STORE_TABLE} WHERE id = %s"
INSERT_VERSION: Final = (
    f"INSERT INTO {VERSION_TABLE} (store_name, store_id, instance_id, version, "
    "changed_paths, step_execution_id, step_key, state, created_at) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
PRUNE_VERSION: Final = f"DELETE FROM {VERSION_TABLE} WHERE instance_id = %s AND version = %s"
#: The ledger row; no row returned when the step is recorded already.
RECORD_STEP: Final = (
    f"INSERT INTO {LEDGER_TABLE} "
    "(store_name, store_id, execution_id, step_key, result, operation, created_at) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (store_name, store_id, execution_id, step_key) DO NOTHING RETURNING id"
)

# --- the commit as one call (PostgreSQL) --------------------------------------------------

#: The store commit: every mutation, and deletions (``p_operation`` ``'delete'``).
COMMIT_FUNCTION: Final = "yieldstar_commit_mutation_v3"
COMMIT_CALL: Final = (
    f"SELECT * FROM {COMMIT_FUNCTION}(%s::text, %s::text, %s::text, %s::bigint, "
    "%s::boolean, %s::text, %s::text, %s::text, %s::boolean, %s::text[], %s::text[], "
    "%s::text, %s::text, %s::text, %s::text, %s::boolean, %s::bigint, %s::double precision, "
    "%s::text[])"
)

# --- waiters ------------------------------------------------------------------------------

#: A waiter's registration in one call (PostgreSQL), fenced by a run's lease if one is
#: given (its last two arguments: owner token and finished statuses, or NULLs).
#: ``yieldstar_register_waiter_v1`` (unfenced) stays for the processes of the release
#: before during a rolling deploy.
REGISTER_WAITER_FUNCTION: Final = "yieldstar_register_waiter_v2"
REGISTER_WAITER_CALL: Final = (
    f"SELECT * FROM {REGISTER_WAITER_FUNCTION}(%s::text, %s::text, %s::text, %s::text, "
    "%s::text, %s::text, %s::bigint, %s::text, %s::smallint[], %s::text[], %s::smallint[], "
    "%s::text[], %s::timestamptz, %s::double precision, %s::timestamptz, %s::text, %s::text[])"
)

#: A fenced registration's check (portable), before the store row's read: the execution
#: (``%s``) leased to the registering run (``%s``); ``{live}``: `` AND status NOT IN (%s,
#: ...)`` (its finished statuses) or nothing; ``{lock}``: a share lock on the row.
LEASE_HELD: Final = (
    f"SELECT 1 FROM {EXECUTION_TABLE} WHERE id = %s AND lease_owner = %s{{live}}{{lock}}"
)

#: The store row under ``{lock}`` (a share lock): a registration's linearization point.
READ_STORE_FOR_WAITER: Final = (
    f"SELECT id, instance_id, version FROM {STORE_TABLE} WHERE name = %s AND store_id = %s{{lock}}"
)
UPSERT_WAITER: Final = (
    f"INSERT INTO {WAITER_TABLE} (workflow_id, execution_id, step_key, store_pk, "
    "instance_id, since_version, read_paths, created_at, woken_at) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (execution_id, step_key, store_pk) DO UPDATE SET "
    "workflow_id = excluded.workflow_id, instance_id = excluded.instance_id, "
    "since_version = excluded.since_version, read_paths = excluded.read_paths, "
    "created_at = excluded.created_at, woken_at = excluded.woken_at RETURNING id"
)
DELETE_WAITER_PATHS: Final = f"DELETE FROM {WAITER_PATH_TABLE} WHERE waiter_id = %s"
#: The start of a multi-row insert of path rows: append ``(%s, %s, %s, %s)`` per row.
INSERT_WAITER_PATHS: Final = (
    f"INSERT INTO {WAITER_PATH_TABLE} (waiter_id, store_pk, kind, path) VALUES "
)
#: The waiters of an execution (``{where}``: ``execution_id = %s`` [``AND step_key = %s``]).
REMOVE_WAITER_PATHS: Final = (
    f"DELETE FROM {WAITER_PATH_TABLE} WHERE waiter_id IN "
    f"(SELECT id FROM {WAITER_TABLE} WHERE {{where}})"
)
REMOVE_WAITERS: Final = f"DELETE FROM {WAITER_TABLE} WHERE {{where}}"
#: Lock the waiters of an execution's steps in registration order (``{where}`` as above;
#: PostgreSQL).
LOCK_WAITERS: Final = f"SELECT id FROM {WAITER_TABLE} WHERE {{where}} ORDER BY id FOR UPDATE"
#: Mark woken the waiters ``{ids}`` whose rows no other transaction holds (``{lock}``:
#: `` FOR NO KEY UPDATE SKIP LOCKED`` on PostgreSQL): a commit never waits on a waiter row.
MARK_WOKEN: Final = (
    f"UPDATE {WAITER_TABLE} SET woken_at = %s WHERE id IN "
    f"(SELECT id FROM {WAITER_TABLE} WHERE id IN ({{ids}}){{lock}})"
)
DELETE_STORE_WAITER_PATHS: Final = f"DELETE FROM {WAITER_PATH_TABLE} WHERE store_pk = %s"
DELETE_STORE_WAITERS: Final = f"DELETE FROM {WAITER_TABLE} WHERE store_pk = %s"
LIST_WAITERS: Final = (
    "SELECT w.workflow_id, w.execution_id, w.step_key, w.instance_id, "
    f"w.since_version, w.read_paths FROM {WAITER_TABLE} w "
    f"JOIN {STORE_TABLE} s ON s.id = w.store_pk "
    "WHERE s.name = %s AND s.store_id = %s ORDER BY w.id"
)


#: Index probes (``UNION ALL`` branches) per matching statement: SQLite refuses a compound
#: ``SELECT`` of more than 500 terms (``SQLITE_MAX_COMPOUND_SELECT``), and PostgreSQL parses
#: a chain of branches recursively (some thousands exceed ``max_stack_depth``).
PROBES_PER_STATEMENT: Final = 250


def matching_waiters_sql(
    store_pk: int, match: PathMatch, *, always: bool = True
) -> tuple[str, list[Any]]:
    """The portable query for the waiters a change intersects: ``(id, execution_id,
    workflow_id, woken_at)`` rows in registration order.

    Every lookup of a path row is an equality on all three columns of the
    ``(store_pk, kind, path)`` index, one key per ``UNION ALL`` branch (never ``IN (...)``,
    which a planner with stale statistics may check as a filter over every row of a kind),
    so any plan of it is an index probe whatever the statistics say. ``always``: with the
    branch of the ``ALWAYS`` rows. A change of many paths is looked up in several
    statements, :func:`matching_waiters_statements`."""
    columns = f"SELECT id, execution_id, workflow_id, woken_at FROM {WAITER_TABLE} WHERE "
    if match.wake_all:
        return f"{columns}store_pk = %s ORDER BY id", [store_pk]
    probe = f"SELECT waiter_id FROM {WAITER_PATH_TABLE} WHERE store_pk = %s AND kind = "
    parts = [f"{probe}{WaiterKind.ALWAYS:d}"] if always else []
    params: list[Any] = [store_pk] if always else []
    for kind, keys in ((WaiterKind.READ, match.read_keys), (WaiterKind.PREFIX, match.prefix_keys)):
        for key in keys:
            parts.append(f"{probe}{kind:d} AND path = %s")
            params += [store_pk, key]
    return f"{columns}id IN ({' UNION ALL '.join(parts)}) ORDER BY id", params


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
