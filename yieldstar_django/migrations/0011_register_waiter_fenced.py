"""A waiter's registration fenced by the lease of the run that registers it (PostgreSQL):
``yieldstar_register_waiter_v2`` takes the run's lease token and the finished statuses and
first reads the execution's row under a share lock; a run whose lease was taken over (or
released, or whose execution finished) registers nothing and writes no wake, instead of
leaving a waiter for a step its successor may have completed. Without a token it is
``yieldstar_register_waiter_v1``, which stays, unchanged, for the processes of the
release before during a rolling deploy. Backward, v2 is dropped."""

from __future__ import annotations

from django.db import migrations

from yieldstar_django.sql import REGISTER_WAITER_V2_DROP, load, postgres_only


class Migration(migrations.Migration):
    dependencies = [("yieldstar", "0010_idempotency_key_shared")]

    operations = [postgres_only([load("yieldstar_register_waiter_v2")], [REGISTER_WAITER_V2_DROP])]
