"""PostgreSQL's functions, indexes and table settings (hand-written; keep it when
regenerating ``0001_initial``). Nothing happens elsewhere than on PostgreSQL: the
connector's portable path runs the same steps as separate statements.

The SQL is in ``yieldstar_django/sql/``, one file a function, created in the order below
(each after the functions it calls):

- the commit, ``yieldstar_commit_mutation_v3`` (updates, takes and deletions; one round
  trip per commit), with the helpers it calls: ``yieldstar_recorded_status_v1`` and
  ``yieldstar_ledger_status_v1`` (a recorded step's result and what it means to this
  commit), ``yieldstar_record_step_v1`` (the ledger row), ``yieldstar_write_intents_v1``
  (the wake intents), ``yieldstar_waiter_ids_v1`` and ``yieldstar_wake_waiters_v1`` (the
  waiters a change wakes, marked woken). It must run at READ COMMITTED, PostgreSQL's
  default: each statement of a VOLATILE PL/pgSQL function takes a fresh snapshot, so the
  ledger check and the waiter match that follow the row lock see everything committed
  before the lock was granted;
- the waiter registration, ``yieldstar_register_waiter_v2`` (fenced by the lease of the
  run that registers);
- ``postgres_tables.sql``: the ``C``-collation and prefix indexes of store ids, and lower
  autovacuum analyze thresholds on the waiter tables (2% + 1,000 rows), so statistics follow
  a burst of registrations within an autovacuum round.

Backward, ``postgres_drop.sql`` removes all of it.
"""

from __future__ import annotations

from django.db import migrations

from yieldstar_django.sql import load, postgres_only, statements

FUNCTIONS = (
    "yieldstar_recorded_status_v1",
    "yieldstar_ledger_status_v1",
    "yieldstar_record_step_v1",
    "yieldstar_write_intents_v1",
    "yieldstar_waiter_ids_v1",
    "yieldstar_wake_waiters_v1",
    "yieldstar_commit_mutation_v3",
    "yieldstar_register_waiter_v2",
)


class Migration(migrations.Migration):
    dependencies = [("yieldstar", "0001_initial")]

    operations = [
        postgres_only(
            [*map(load, FUNCTIONS), *statements("postgres_tables")],
            statements("postgres_drop"),
        )
    ]
