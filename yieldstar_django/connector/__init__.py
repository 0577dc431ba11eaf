"""The database store client: the compare-and-swap store protocol on Django's database.

Modules: :mod:`.client` (``DatabaseStoreClient``, ``get_store_client``), :mod:`.portable`
(the commit as statements), :mod:`.functions` (the commit as one PL/pgSQL call),
:mod:`.waiters` (``LeaseFence``: a registration fenced by a run's lease), :mod:`.hooks`
(``CommitHook``), :mod:`.statements` (the waiter lookups, whose text depends on the paths;
every other statement is a named entry of ``sql/queries.sql``),
:mod:`.arguments` (key checks), :mod:`.cursors` (the hot path's server-side cursor).

``get_store_client(using)`` returns a :class:`DatabaseStoreClient`, a ``CasStoreClient``
whose primitives commit in one database transaction each. ``CasStoreClient`` runs all user
code (``initial``, updaters, selectors, claims, schemas) before the transaction and hands
this module canonical JSON text, so a value the core rejects never reaches SQL.

A commit (``commit_mutation``) does, in one transaction, in this order:

1. the ledger lookup for the step id: a recorded result wins over every other check;
2. the store row lock (``FOR NO KEY UPDATE`` on PostgreSQL; SQLite's ``BEGIN IMMEDIATE``
   already holds the database write lock) and the (instance_id, version) comparison, or
   the insertion of a missing store (``ON CONFLICT DO NOTHING``, so concurrent first touches
   record one instance);
3. the ledger row (``ON CONFLICT DO NOTHING``: a concurrent commit of the same step that
   slipped in is reported as already applied and nothing is written);
4. the new state, the version row (and version 0 for a created store), history pruning;
5. the waiters whose read paths intersect the changed paths, found by index
   (:class:`~yieldstar_django.models.WaiterPath`, ``core/waiter_index.py``), and one wake intent
   per woken execution.

``transaction.on_commit`` then hands the wakes to the ``WAKE_BACKEND``
(:mod:`yieldstar_django.wakes`). Every primitive joins an enclosing ``transaction.atomic``:
a user can change their models and stores in one transaction, wakes go out only when the
outermost transaction commits, and a rollback wakes nobody.

Locks are always taken in the same order, store row first, then ledger, versions, waiters
and outbox, and each commit locks a single store row. A transaction of your own that
changes several stores should change them in a consistent order (say, sorted by name and
id); PostgreSQL detects a deadlock between two that do not and aborts one.

On PostgreSQL a mutation or deletion is one call of a PL/pgSQL function
(``yieldstar_django/sql/``, created by migration ``0002_postgres``), one round
trip; elsewhere the same steps run as separate statements. Both must run at READ
COMMITTED, PostgreSQL's default isolation level.

No application code runs inside these transactions. A caller that must record something of
its own atomically with a mutation (the runtime's heap row) hands it to the commit with
:meth:`DatabaseStoreClient.commit_hook` instead of wrapping the store call in
``transaction.atomic`` (which would hold the transaction, and SQLite's write lock, open
across the updater, selector or claim).
"""

from __future__ import annotations

from .client import DatabaseStoreClient, get_store_client
from .hooks import CommitHook
from .statements import matching_waiters_sql
from .waiters import LeaseFence, LeaseNotHeld

__all__ = [
    "CommitHook",
    "DatabaseStoreClient",
    "LeaseFence",
    "LeaseNotHeld",
    "get_store_client",
    "matching_waiters_sql",
]
