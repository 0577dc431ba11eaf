"""The suite's own model: `Entry`, a project's table written by `step.atomic` steps."""

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="Entry",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("execution_id", models.CharField(max_length=255)),
                ("step", models.CharField(max_length=255)),
                ("token", models.CharField(max_length=64)),
            ],
            options={
                "db_table": "yieldstar_tests_entry",
                "indexes": [
                    models.Index(fields=["execution_id"], name="yieldstar_tests_entry_exec")
                ],
            },
        ),
    ]
