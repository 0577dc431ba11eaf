"""Indexes retention needs: finished executions oldest first, and the ledger by execution."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("yieldstar", "0004_wake_acknowledgement"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="execution",
            index=models.Index(
                fields=["status", "finished_at"], name="yieldstar_exec_finished_idx"
            ),
        ),
        migrations.AddIndex(
            model_name="appliedstep",
            index=models.Index(fields=["execution_id"], name="yieldstar_applied_step_exec"),
        ),
    ]
