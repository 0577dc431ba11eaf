"""Cohorts of waiters: takes whose selectors are the same function of the state
(``yieldstar_django.core.cohorts``) are woken one at a time, the first in registration
order, instead of all at once. ``Waiter.cohort`` holds the digest (``NULL``: none, as
every waiter registered before), with an index of each cohort's unwoken waiters. On
PostgreSQL, new function versions beside the previous release's:
``yieldstar_wake_waiters_v2`` (of a cohort, the first), ``yieldstar_commit_mutation_v4``
(``_v3`` calling it) and ``yieldstar_register_waiter_v3`` (``_v2`` with the cohort)."""

from __future__ import annotations

from django.db import migrations, models

from yieldstar_django.sql import load, postgres_only, statements

FUNCTIONS = (
    "yieldstar_wake_waiters_v2",
    "yieldstar_commit_mutation_v4",
    "yieldstar_register_waiter_v3",
)


class Migration(migrations.Migration):
    dependencies = [
        ("yieldstar", "0013_children"),
    ]

    operations = [
        migrations.AddField(
            model_name="waiter",
            name="cohort",
            field=models.CharField(blank=True, max_length=64, null=True, verbose_name="cohort"),
        ),
        migrations.AddIndex(
            model_name="waiter",
            index=models.Index(
                condition=models.Q(("cohort__isnull", False), ("woken_at__isnull", True)),
                fields=["store", "cohort", "id"],
                name="yieldstar_waiter_cohort",
            ),
        ),
        postgres_only([*map(load, FUNCTIONS)], statements("drop_waiter_cohorts")),
    ]
