"""The models leave their names to Django's defaults where those say the same: the
verbose name of the class name and the plural with an "s" (the admin shows the same
names). No SQL."""

from __future__ import annotations

from django.db import migrations

DEFAULT_NAMED = [
    "appliedstep",
    "idempotencykey",
    "storeversion",
    "waiter",
    "waiterpath",
    "wakeintent",
]


class Migration(migrations.Migration):
    dependencies = [("yieldstar", "0004_commit_unwaits")]

    operations = [
        migrations.AlterModelOptions(name="storeinstance", options={"verbose_name": "store"}),
        *(migrations.AlterModelOptions(name=model, options={}) for model in DEFAULT_NAMED),
    ]
