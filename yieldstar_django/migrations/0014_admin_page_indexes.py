"""Two indexes the admin reads a page of rows through, in the order it shows them:
``yieldstar_waiter_listed`` (a store's waiters in the order they registered: the store
page) and ``yieldstar_step_replay_idx`` (an execution's heap in replay order: the
execution page). Without them PostgreSQL sorted every waiter of the store, or the whole
heap of the execution, to show the first page.

The indexes are created ``IF NOT EXISTS`` (the same statements on PostgreSQL and SQLite),
so on large tables they can be built beforehand with ``CREATE INDEX CONCURRENTLY`` and
this migration then does nothing (see docs/operations/database.md); the state is the
models' ``Meta.indexes`` entries."""

from __future__ import annotations

from django.db import migrations, models

WAITERS = "yieldstar_waiter_listed"
STEPS = "yieldstar_step_replay_idx"


class Migration(migrations.Migration):
    dependencies = [("yieldstar", "0013_idempotency_key_index")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddIndex(
                    model_name="waiter",
                    index=models.Index(fields=["store", "created_at", "id"], name=WAITERS),
                ),
                migrations.AddIndex(
                    model_name="executionstep",
                    index=models.Index(fields=["execution", "position", "id"], name=STEPS),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    f"CREATE INDEX IF NOT EXISTS {WAITERS} ON yieldstar_waiter "
                    "(store_pk, created_at, id)",
                    f"DROP INDEX IF EXISTS {WAITERS}",
                ),
                migrations.RunSQL(
                    f"CREATE INDEX IF NOT EXISTS {STEPS} ON yieldstar_execution_step "
                    '(execution_id, "position", id)',
                    f"DROP INDEX IF EXISTS {STEPS}",
                ),
            ],
        )
    ]
