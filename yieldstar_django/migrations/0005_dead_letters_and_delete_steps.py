"""Dead letters of leased claims and the ``delete`` step.

- ``ClaimLeaseRecord.delivery``: which leased take of its value a lease is (1 for every
  lease taken before; a database default, so code that does not know the column still
  inserts leases);
- the lease states ``dead_lettered`` and ``requeued``, and the heap's step kind
  ``delete`` (choices only: no schema change);
- ``ClaimDelivery``: the expiries counted per value of a store instance.
"""

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("yieldstar", "0004_atomic_step_kind"),
    ]

    operations = [
        migrations.AddField(
            model_name="claimleaserecord",
            name="delivery",
            field=models.IntegerField(db_default=1, default=1),
        ),
        migrations.AlterField(
            model_name="claimleaserecord",
            name="state",
            field=models.CharField(
                choices=[
                    ("held", "held"),
                    ("completed", "completed"),
                    ("released", "released"),
                    ("expired", "expired"),
                    ("dead_lettered", "dead-lettered"),
                    ("requeued", "requeued"),
                ],
                default="held",
                max_length=16,
            ),
        ),
        migrations.AlterField(
            model_name="executionstep",
            name="kind",
            field=models.CharField(
                choices=[
                    ("run", "run"),
                    ("sleep", "sleep"),
                    ("take", "take"),
                    ("update", "update"),
                    ("get", "get"),
                    ("patch", "patch"),
                    ("take_any", "take_any"),
                    ("take_lease", "take_lease"),
                    ("end_lease", "end_lease"),
                    ("atomic", "atomic"),
                    ("delete", "delete"),
                ],
                max_length=16,
            ),
        ),
        migrations.CreateModel(
            name="ClaimDelivery",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("store_name", models.CharField(max_length=255)),
                ("store_id", models.CharField(max_length=255)),
                ("instance_id", models.CharField(max_length=64)),
                ("value_digest", models.CharField(max_length=64)),
                ("expiries", models.IntegerField(default=0)),
                ("updated_at", models.DateTimeField(default=django.utils.timezone.now)),
            ],
            options={
                "verbose_name": "claim delivery count",
                "db_table": "yieldstar_claim_delivery",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("store_name", "store_id", "instance_id", "value_digest"),
                        name="yieldstar_claim_delivery_key",
                    )
                ],
            },
        ),
    ]
