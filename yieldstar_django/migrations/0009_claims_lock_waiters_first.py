"""A claim's commit locks its step's own waiters before the store's row when there are
several (a ``take_any`` on several stores; PostgreSQL): ``yieldstar_commit_mutation_v3`` is
loaded again (same contract). A transaction that woke one of those waiters holds its row
and may next ask for the store's row; taking the store's row first, the claim deadlocked
with it. Backward, nothing: the earlier body differs only in that order."""

from __future__ import annotations

from django.db import migrations

from yieldstar_django.sql import load, postgres_only


class Migration(migrations.Migration):
    dependencies = [("yieldstar", "0008_generic_plans")]

    operations = [postgres_only([load("yieldstar_commit_mutation_v3")], [])]
