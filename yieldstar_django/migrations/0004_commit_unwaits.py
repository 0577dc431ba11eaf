"""The store commit removes the committing step's own waiters (PostgreSQL):
``yieldstar_commit_mutation_v3`` takes ``p_unwait_keys`` and deletes, once it holds the
store row, the waiters of those step keys of the step's execution, which a resumed
``take`` did in two statements before the call. ``yieldstar_commit_mutation_v2`` (the
previous contract, for the previous release's processes during a rolling deploy) becomes a
wrapper of it; a later migration drops it. Both commit functions now call the same helpers
(``sql.COMMIT_FUNCTIONS``) for the ledger and the wake intents: ``yieldstar_commit_deletion_v2`` is
loaded again (same contract). Backward, everything stays: ``_v2`` keeps its contract.
"""

from __future__ import annotations

from django.db import migrations

from yieldstar_django.sql import COMMIT_FUNCTIONS, postgres_only


class Migration(migrations.Migration):
    dependencies = [("yieldstar", "0003_waiter_woken_at")]

    operations = [postgres_only(COMMIT_FUNCTIONS, [])]
