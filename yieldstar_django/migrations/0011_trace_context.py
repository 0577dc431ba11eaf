"""The W3C trace context of an execution's start (``Execution.trace_context``): its resumes,
in other processes and days later, continue that trace (``observability.tracing``)."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("yieldstar", "0010_queues"),
    ]

    operations = [
        migrations.AddField(
            model_name="execution",
            name="trace_context",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                help_text=(
                    "W3C traceparent of its start (with tracing on): its runs join that trace."
                ),
                max_length=255,
            ),
        ),
    ]
