"""The `atomic` step kind among the heap's kinds (`step.atomic`)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("yieldstar", "0003_execution_started_by"),
    ]

    operations = [
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
                ],
                max_length=16,
            ),
        ),
    ]
