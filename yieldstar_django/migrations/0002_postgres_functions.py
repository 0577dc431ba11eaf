"""PostgreSQL functions that commit a store mutation or deletion in one round trip, and mark
wake intents delivered without waiting for a WAL flush.

Hand-written (keep it when regenerating ``0001_initial``). The SQL is in
``yieldstar_django/sql/`` (one file per function, and the drops). On other databases it does
nothing: the connector's portable path runs the same steps as separate statements.
The function names carry a version; a change of their contract is a new function in a new
migration, so a rolling deploy never calls a body it does not expect.

Both functions must run at READ COMMITTED (PostgreSQL's default): each statement of a
VOLATILE PL/pgSQL function takes a fresh snapshot, so the ledger check and the waiter match
that follow the row lock see everything committed before the lock was granted.
"""

from __future__ import annotations

from django.db import migrations

from yieldstar_django.sql import load, postgres_only, statements

create_functions, drop_functions = postgres_only(
    [
        load("yieldstar_commit_mutation_v1"),
        load("yieldstar_commit_deletion_v1"),
        load("yieldstar_mark_delivered_v1"),
    ],
    statements("0002_postgres_functions.down"),
)


class Migration(migrations.Migration):
    dependencies = [("yieldstar", "0001_initial")]

    operations = [migrations.RunPython(create_functions, drop_functions, elidable=False)]
