"""The ledger records the kind of operation of each step (``AppliedStep.operation``), and
the executions name their workflow ``workflow_id``, as waiters, wakes and intents do.

Rows recorded before this migration get an empty ``operation`` (unknown): their result text
names its kind, and an empty operation matches any in the commit paths. The PL/pgSQL functions
that record and check the kind are new versions (``_v2``, in ``yieldstar_django/sql/``);
the ``_v1`` ones stay for a rolling deploy (they record an empty operation).
"""

from __future__ import annotations

from django.db import migrations, models

from yieldstar_django.sql import load, postgres_only, statements

create_functions, drop_functions = postgres_only(
    [
        load("yieldstar_recorded_status_v1"),
        load("yieldstar_commit_mutation_v2"),
        load("yieldstar_commit_deletion_v2"),
    ],
    statements("0007_ledger_operation.down"),
)


class Migration(migrations.Migration):
    dependencies = [("yieldstar", "0006_take_any_patches_claim_leases")]

    operations = [
        migrations.AddField(
            model_name="appliedstep",
            name="operation",
            field=models.CharField(
                blank=True,
                choices=[("update", "update"), ("take", "take"), ("delete", "delete")],
                db_default="",
                default="",
                max_length=16,
                verbose_name="operation",
            ),
        ),
        migrations.RenameField(
            model_name="execution",
            old_name="workflow_name",
            new_name="workflow_id",
        ),
        migrations.RunPython(create_functions, drop_functions, elidable=False),
    ]
