"""An index on ``IdempotencyKey.key`` alone: the admin's search finds a key (of any
principal) exactly through it, where the unique index, which leads with the principal,
cannot serve it (PostgreSQL 15 scanned the whole table).

The index is created ``IF NOT EXISTS`` (the same statement on PostgreSQL and SQLite), so on
a large table it can be built beforehand with ``CREATE INDEX CONCURRENTLY`` and this
migration then does nothing (see docs/operations/database.md); the state is the model's
``Meta.indexes`` entry."""

from __future__ import annotations

from django.db import migrations, models

INDEX = "yieldstar_idem_key_idx"


class Migration(migrations.Migration):
    dependencies = [("yieldstar", "0012_step_patch_index")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddIndex(
                    model_name="idempotencykey",
                    index=models.Index(fields=["key"], name=INDEX),
                )
            ],
            database_operations=[
                migrations.RunSQL(
                    f'CREATE INDEX IF NOT EXISTS {INDEX} ON yieldstar_idempotencykey ("key")',
                    f"DROP INDEX IF EXISTS {INDEX}",
                )
            ],
        )
    ]
