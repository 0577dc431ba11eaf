"""A waiter is woken once per registration: ``Waiter.woken_at``, and on PostgreSQL
``yieldstar_waiter_ids_v1`` with ``yieldstar_wake_waiters_v1`` (the lookup that skips and
marks woken waiters) and the commit function loaded again to call it (``CREATE OR
REPLACE``; ``_v3`` since ``0004_commit_unwaits``); ``yieldstar_matching_waiters_v1`` is dropped.
Backward, ``yieldstar_wake_waiters_v1`` becomes the plain lookup (every matching waiter, no
mark), so the commit function keeps working without the column."""

from __future__ import annotations

from django.db import migrations, models

from yieldstar_django.sql import load, postgres_only, statements

UNMARKED = """
CREATE OR REPLACE FUNCTION yieldstar_wake_waiters_v1(
    p_store_pk bigint, p_wake_all boolean, p_read_keys text[], p_prefix_keys text[],
    p_now timestamptz
) RETURNS TABLE (first_id bigint, execution_id text, workflow_id text)
LANGUAGE sql STABLE
AS $$
    SELECT min(w.id), w.execution_id::text, w.workflow_id::text
      FROM yieldstar_waiter w
     WHERE w.id = ANY(CASE WHEN p_wake_all
                           THEN ARRAY(SELECT a.id FROM yieldstar_waiter a
                                       WHERE a.store_pk = p_store_pk)
                           ELSE yieldstar_waiter_ids_v1(p_store_pk, p_read_keys, p_prefix_keys)
                      END)
     GROUP BY w.execution_id, w.workflow_id ORDER BY 1
$$
"""


class Migration(migrations.Migration):
    dependencies = [("yieldstar", "0002_postgres")]

    operations = [
        migrations.AddField(
            model_name="waiter",
            name="woken_at",
            field=models.DateTimeField(blank=True, null=True, verbose_name="woken"),
        ),
        postgres_only(
            [
                load("yieldstar_waiter_ids_v1"),
                load("yieldstar_wake_waiters_v1"),
                load("yieldstar_commit_mutation_v3"),
                *statements("postgres_retired"),
            ],
            [UNMARKED],
        ),
    ]
