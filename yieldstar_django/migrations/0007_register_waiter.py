"""Registering a waiter in one call (PostgreSQL): ``yieldstar_register_waiter_v1`` reads
the store row under a share lock, upserts the waiter and its path rows, and writes the
wake intent of a stale or storeless observation, which the client did in five statements
between a ``BEGIN`` and a ``COMMIT``. Backward, the function is dropped (the portable
statements still register)."""

from __future__ import annotations

from django.db import migrations

from yieldstar_django.sql import REGISTER_WAITER_DROP, load, postgres_only


class Migration(migrations.Migration):
    dependencies = [("yieldstar", "0006_commit_deletes")]

    operations = [postgres_only([load("yieldstar_register_waiter_v1")], [REGISTER_WAITER_DROP])]
