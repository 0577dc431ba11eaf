"""Drop the foreign-key indexes that another index of their table begins with: the heap's
``execution_id`` index (and, on PostgreSQL, its ``varchar_pattern_ops`` twin), which the
unique ``(execution_id, step_key)`` and ``yieldstar_step_replay_idx`` serve, and the
waiters' ``store_pk`` index, which ``yieldstar_waiter_listed`` serves. Every heap row (one
per step) and every waiter paid a write to each of them.

``DROP INDEX IF EXISTS`` on both backends (the names are Django's, the same on each), so
SQLite's tables are not rebuilt; the state is the fields' ``db_index=False``. Reversed, it
creates them again."""

from __future__ import annotations

import django.db.models.deletion
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

STEP_EXECUTION = "yieldstar_execution_step_execution_id_9e8e1994"
WAITER_STORE = "yieldstar_waiter_store_pk_d943c43f"


def _drop(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    connection = schema_editor.connection
    names = [STEP_EXECUTION, WAITER_STORE]
    if connection.vendor == "postgresql":
        names.append(f"{STEP_EXECUTION}_like")
    for name in names:
        schema_editor.execute(f"DROP INDEX IF EXISTS {name}")


def _create(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    connection = schema_editor.connection
    statements = [
        f"CREATE INDEX IF NOT EXISTS {STEP_EXECUTION} ON yieldstar_execution_step (execution_id)",
        f"CREATE INDEX IF NOT EXISTS {WAITER_STORE} ON yieldstar_waiter (store_pk)",
    ]
    if connection.vendor == "postgresql":
        statements.append(
            f"CREATE INDEX IF NOT EXISTS {STEP_EXECUTION}_like ON yieldstar_execution_step "
            "(execution_id varchar_pattern_ops)"
        )
    for statement in statements:
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("yieldstar", "0015_claim_lease_instance")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="executionstep",
                    name="execution",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="steps",
                        to="yieldstar.execution",
                    ),
                ),
                migrations.AlterField(
                    model_name="waiter",
                    name="store",
                    field=models.ForeignKey(
                        db_column="store_pk",
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="waiters",
                        to="yieldstar.storeinstance",
                        verbose_name="store",
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(_drop, _create)],
        )
    ]
