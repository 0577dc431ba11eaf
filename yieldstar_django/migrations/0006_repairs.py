"""Repairing executions: where a fork came from (``forked_from``, ``fork_step``), how
many times an execution was retried (``retries``), and the permissions of the retry and
fork endpoints and admin actions (``retry_execution``, ``fork_execution``)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("yieldstar", "0005_dead_letters_and_delete_steps"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="execution",
            options={
                "ordering": ["-created_at"],
                "permissions": [
                    ("retry_execution", "Can retry a failed or cancelled execution"),
                    ("fork_execution", "Can fork an execution from one of its steps"),
                ],
            },
        ),
        migrations.AddField(
            model_name="execution",
            name="fork_step",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="How many recorded steps of ``forked_from`` its heap began with.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="execution",
            name="forked_from",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                help_text="Id of the execution this one was forked from (``fork_execution``).",
                max_length=255,
            ),
        ),
        migrations.AddField(
            model_name="execution",
            name="retries",
            field=models.PositiveIntegerField(
                db_default=0,
                default=0,
                help_text="Times ``retry_execution`` sent it back to run (failed or cancelled).",
            ),
        ),
    ]
