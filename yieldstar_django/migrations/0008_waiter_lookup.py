"""Waiter lookups whose plans do not depend on statistics (PostgreSQL).

Hand-written. A long-lived connection keeps the generic plan of a PL/pgSQL statement until
the next ``ANALYZE`` of its tables: a plan made while the waiter tables were empty (a fresh
database) stays a sequential scan after a burst of registrations (a fan-out), and every
commit then reads every waiter. This migration

- adds ``yieldstar_matching_waiters_v1`` (``0008_waiter_lookup.sql``): the waiters a
  change wakes, found by one equality probe per key on ``(store_pk, kind, path)`` and one
  primary-key probe per waiter, with ``enable_seqscan = off``;
- re-creates ``yieldstar_commit_mutation_v2`` with the same contract, calling it, with
  ``enable_seqscan = off`` for its body (``0008_waiter_lookup.commit_mutation.sql``), and
  sets ``enable_seqscan = off`` on ``yieldstar_commit_deletion_v2``;
- lowers the autovacuum analyze thresholds of ``yieldstar_waiter`` and
  ``yieldstar_waiterpath`` (2% + 1,000 rows), so statistics, and the plans of the portable
  statements a connection may have prepared, follow a burst within an autovacuum round.

Reversing it restores the ``0007`` body and the defaults. Nothing happens elsewhere than
on PostgreSQL.
"""

from __future__ import annotations

from django.db import migrations

from yieldstar_django.sql import load, postgres_only, statements

forward, backward = postgres_only(
    [
        load("0008_waiter_lookup"),
        load("0008_waiter_lookup.commit_mutation"),
        *statements("0008_waiter_lookup.settings"),
    ],
    [
        load("yieldstar_commit_mutation_v2"),
        "DROP FUNCTION IF EXISTS yieldstar_matching_waiters_v1(bigint, boolean, text[], text[])",
        *statements("0008_waiter_lookup.down"),
    ],
)


class Migration(migrations.Migration):
    dependencies = [("yieldstar", "0007_ledger_operation")]

    operations = [migrations.RunPython(forward, backward, elidable=False)]
