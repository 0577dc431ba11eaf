"""PostgreSQL's functions, indexes and table settings (hand-written; keep it when
regenerating ``0001_initial``).

The SQL is in ``yieldstar_django/sql/``:

- the commit function ``yieldstar_commit_mutation_v3`` (deletions too since
  ``0006_commit_deletes``; ``yieldstar_commit_mutation_v2`` and
  ``yieldstar_commit_deletion_v2``, the earlier contracts, are wrappers of it)
  (one round trip per commit; they must run at READ COMMITTED, PostgreSQL's default: each
  statement of a VOLATILE PL/pgSQL function takes a fresh snapshot, so the ledger check and
  the waiter match that follow the row lock see everything committed before the lock was
  granted), with ``yieldstar_waiter_ids_v1`` and ``yieldstar_wake_waiters_v1`` (the waiter
  lookup, whose ``woken_at`` column ``0003_waiter_woken_at`` adds) and
  ``yieldstar_recorded_status_v1`` (a ledger row's kind against a commit's) and the
  helpers both commit functions call (``sql.COMMIT_FUNCTIONS``: the ledger lookup and insert, the
  wake intents), which ``0004_commit_unwaits`` introduced;
- ``postgres_tables.sql``: the ``C``-collation and prefix indexes of store ids, and lower
  autovacuum analyze thresholds on the waiter tables (2% + 1,000 rows), so statistics follow
  a burst of registrations within an autovacuum round;
- ``postgres_retired.sql``: drops the functions of the development versions before the
  migrations were squashed (``_v1`` commit functions, ``yieldstar_mark_delivered_v1``) and
  ``yieldstar_matching_waiters_v1`` (the lookup before ``yieldstar_wake_waiters_v1``).

Every statement is idempotent, so a database migrated by those versions (whose
``0002_postgres_functions`` … ``0008_waiter_lookup`` are no longer on disk) is brought to
the same state. Nothing happens elsewhere than on PostgreSQL: the connector's portable path
runs the same steps as separate statements.
"""

from __future__ import annotations

from django.db import migrations

from yieldstar_django.sql import COMMIT_FUNCTIONS, load, postgres_only, statements


class Migration(migrations.Migration):
    dependencies = [("yieldstar", "0001_initial")]

    operations = [
        postgres_only(
            [
                load("yieldstar_recorded_status_v1"),
                load("yieldstar_waiter_ids_v1"),
                load("yieldstar_wake_waiters_v1"),
                *COMMIT_FUNCTIONS,
                *statements("postgres_tables"),
                *statements("postgres_retired"),
            ],
            statements("postgres_drop"),
        )
    ]
