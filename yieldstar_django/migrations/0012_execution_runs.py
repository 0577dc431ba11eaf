"""The runs of an execution (``ExecutionRun``): one row per taking of its lease, written by
the statements that take and let go of the lease, naming the worker and when the run
began and ended; the execution page of the admin draws them on its timeline, and a run
that never ended shows a worker that died or lost its lease, and the takeover after it.
A heap row's ``created_at`` is now when its step began."""

from __future__ import annotations

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("yieldstar", "0011_trace_context"),
    ]

    operations = [
        migrations.CreateModel(
            name="ExecutionRun",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                (
                    "number",
                    models.PositiveIntegerField(help_text="1 for the first run, then 2, ..."),
                ),
                (
                    "lease_owner",
                    models.CharField(help_text="The run's lease token.", max_length=64),
                ),
                (
                    "worker",
                    models.CharField(
                        blank=True,
                        db_default="",
                        default="",
                        help_text="The process that ran it: host name and process id.",
                        max_length=255,
                    ),
                ),
                ("started_at", models.DateTimeField()),
                (
                    "ended_at",
                    models.DateTimeField(
                        blank=True,
                        help_text="When it let the lease go; empty if it never did.",
                        null=True,
                    ),
                ),
                (
                    "outcome",
                    models.CharField(
                        blank=True,
                        db_default="",
                        default="",
                        help_text="The execution's status when the run let the lease go.",
                        max_length=16,
                    ),
                ),
                (
                    "execution",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="run_rows",
                        to="yieldstar.execution",
                    ),
                ),
            ],
            options={
                "verbose_name": "execution run",
                "db_table": "yieldstar_execution_run",
                "ordering": ["execution", "number"],
                "indexes": [
                    models.Index(fields=["execution", "number"], name="yieldstar_run_number_idx")
                ],
            },
        ),
        migrations.AlterField(
            model_name="executionstep",
            name="created_at",
            field=models.DateTimeField(
                default=django.utils.timezone.now,
                help_text="When the step began, in the run that wrote the row.",
            ),
        ),
    ]
