"""Child workflows and deadlines: ``Execution.parent``, ``deadline``, ``awaited`` and
``awaiting``, the ``start`` and ``wait`` step kinds, and ``ChildWait`` (what a waiting
``step.wait``/``step.gather`` waits for)."""

from __future__ import annotations

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("yieldstar", "0012_execution_runs"),
    ]

    operations = [
        migrations.AddField(
            model_name="execution",
            name="awaited",
            field=models.BooleanField(
                db_default=False,
                default=False,
                help_text="Another execution waits for it (``step.wait``): its end wakes that one.",
            ),
        ),
        migrations.AddField(
            model_name="execution",
            name="awaiting",
            field=models.PositiveIntegerField(
                db_default=0,
                default=0,
                help_text="Executions its waiting ``step.wait``/``step.gather`` still waits for.",
            ),
        ),
        migrations.AddField(
            model_name="execution",
            name="deadline",
            field=models.DateTimeField(
                blank=True,
                db_default=None,
                help_text="When it is cancelled with ``DeadlineExceededError`` if not finished.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="execution",
            name="parent",
            field=models.CharField(
                blank=True,
                db_default="",
                db_index=True,
                default="",
                help_text=(
                    "Id of the execution that started this one with ``step.start`` (empty: none)."
                ),
                max_length=255,
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
                    ("start", "start"),
                    ("wait", "wait"),
                ],
                max_length=16,
            ),
        ),
        migrations.CreateModel(
            name="ChildWait",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("step_key", models.CharField(max_length=255)),
                ("awaited_id", models.CharField(db_index=True, max_length=255)),
                (
                    "execution",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="child_waits",
                        to="yieldstar.execution",
                    ),
                ),
            ],
            options={
                "verbose_name": "awaited execution",
                "db_table": "yieldstar_child_wait",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("execution", "step_key", "awaited_id"),
                        name="yieldstar_child_wait_unique",
                    )
                ],
            },
        ),
    ]
