"""The Django admin of yieldstar_django (autodiscovered as the app's ``admin`` module).

``stores``: store instances with their versions, waiters and ledger entries, and a state
editor that compare-and-swaps. ``runtime``: executions with their heap, resume and cancel
(``patches``: their filter by recorded ``step.patched()`` decision).
``wakes``: the wake outbox, with "deliver again". ``api``: the API's idempotency keys.
``claim_leases``: live leased claims and "release now". ``health``: the banner of failing
health checks on the admin index. ``schedules``: schedules created, paused, resumed and
triggered now (and the executions' filter by schedule).
Everything is read-only unless stated; list pages run a bounded number of queries and
never count a big table (:mod:`~yieldstar_django.admin.pagination`).
"""

from . import api, claim_leases, health, runtime, schedules, stores, wakes

__all__ = ["api", "claim_leases", "health", "runtime", "schedules", "stores", "wakes"]
