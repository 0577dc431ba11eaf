"""The heap's recorded ``step.patched()`` decisions, indexed by change id and value (a
partial index over the ``patch`` rows only): the executions admin's patch decision filter
finds the executions kept on an old branch without scanning the heap.

The index is created ``IF NOT EXISTS`` (the same statement on PostgreSQL and SQLite), so on
a large heap it can be built beforehand with ``CREATE INDEX CONCURRENTLY`` and this
migration then does nothing (see docs/operations/database.md); the state is the model's
``Meta.indexes`` entry."""

from __future__ import annotations

from django.db import migrations, models

INDEX = "yieldstar_step_patch_idx"


class Migration(migrations.Migration):
    dependencies = [("yieldstar", "0011_register_waiter_fenced")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddIndex(
                    model_name="executionstep",
                    index=models.Index(
                        condition=models.Q(("kind", "patch")),
                        fields=["step_key", "value_json"],
                        name=INDEX,
                    ),
                )
            ],
            database_operations=[
                migrations.RunSQL(
                    f"CREATE INDEX IF NOT EXISTS {INDEX} ON yieldstar_execution_step "
                    "(step_key, value_json) WHERE kind = 'patch'",
                    f"DROP INDEX IF EXISTS {INDEX}",
                )
            ],
        )
    ]
