"""``RelayHeartbeat``: when each relay process last ran a round, read by
``yieldstar_health``."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("yieldstar", "0007_lease_backend"),
    ]

    operations = [
        migrations.CreateModel(
            name="RelayHeartbeat",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=255, verbose_name="relay process")),
                (
                    "database",
                    models.CharField(
                        blank=True, default="", max_length=255, verbose_name="database alias"
                    ),
                ),
                ("started_at", models.DateTimeField(verbose_name="started")),
                ("seen_at", models.DateTimeField(db_index=True, verbose_name="last seen")),
            ],
            options={
                "verbose_name": "relay heartbeat",
                "constraints": [
                    models.UniqueConstraint(fields=("name",), name="yieldstar_relay_heartbeat_name")
                ],
            },
        ),
    ]
