"""``Execution.started_by``: who started an execution over the HTTP API, so a user who may
start executions but not view them gets its own start's answer again, and nothing of
anyone else's."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("yieldstar", "0002_postgres"),
    ]

    operations = [
        migrations.AddField(
            model_name="execution",
            name="started_by",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                help_text=(
                    "Who started it over the HTTP API (http:<user pk>); empty for a start "
                    "made in Python."
                ),
                max_length=255,
            ),
        ),
    ]
