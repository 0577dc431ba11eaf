"""The PostgreSQL backend that took an execution's lease (``Execution.lease_backend``): the
relay ends the transaction of a run whose lease expired while it still blocks other
writers (``runtime.leases.reap_frozen_holders``)."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("yieldstar", "0006_repairs"),
    ]

    operations = [
        migrations.AddField(
            model_name="execution",
            name="lease_backend",
            field=models.IntegerField(
                blank=True,
                help_text="PostgreSQL backend (pid) of the connection that took the lease.",
                null=True,
            ),
        ),
    ]
