"""One commit function for every store change (PostgreSQL): ``yieldstar_commit_mutation_v3``
also deletes (``p_operation = 'delete'``), so the comparison, the ledger and the wake
intents are written once. ``yieldstar_commit_deletion_v2`` (the previous release's
deletion) and ``yieldstar_commit_mutation_v2`` become wrappers of it returning a
``yieldstar_commit_outcome_v1``, the type of the columns every commit function answers
(the same columns as before). Backward, everything stays: each name keeps its contract.
"""

from __future__ import annotations

from django.db import migrations

from yieldstar_django.sql import COMMIT_FUNCTIONS, postgres_only


class Migration(migrations.Migration):
    dependencies = [("yieldstar", "0005_default_model_names")]

    operations = [postgres_only(COMMIT_FUNCTIONS, [])]
