"""``IdempotencyKey.shared``: a retry that finds its key bound to its request marks it, and a
first request that failed frees its key only while it is unmarked (the retry may commit
under it). Backward, the column is dropped."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("yieldstar", "0009_claims_lock_waiters_first")]

    operations = [
        migrations.AddField(
            model_name="idempotencykey",
            name="shared",
            field=models.BooleanField(
                db_default=False, default=False, verbose_name="used by a retry"
            ),
        ),
    ]
