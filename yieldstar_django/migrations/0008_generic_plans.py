"""The commit and the waiter registration plan their statements once per connection
(PostgreSQL): ``yieldstar_commit_mutation_v3`` and ``yieldstar_register_waiter_v1`` run
with ``plan_cache_mode = force_generic_plan``, which the functions they call inherit.
Left to choose, PostgreSQL planned the statements that take an array (marking the woken
waiters) again on every wake. Any plan of those statements is an index probe
(``enable_seqscan = off``, equalities on indexes), so the generic one is as good. Forward,
both files are loaded again (same contracts); backward, the setting is reset."""

from __future__ import annotations

from django.db import migrations

from yieldstar_django.sql import GENERIC_PLAN_FUNCTIONS, load, postgres_only


class Migration(migrations.Migration):
    dependencies = [("yieldstar", "0007_register_waiter")]

    operations = [
        postgres_only(
            [load(name) for name in GENERIC_PLAN_FUNCTIONS],
            [f"ALTER FUNCTION {name} RESET plan_cache_mode" for name in GENERIC_PLAN_FUNCTIONS],
        )
    ]
