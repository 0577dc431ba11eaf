"""Commit hooks: a caller's own database work committed in a store commit's transaction."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass

from ..core.commits import CommitOutcome, StoreDeletion, StoredState, StoreMutation

__all__ = ["CommitHook", "KnownReads", "NotCommitted", "current_hook"]

#: Rows a caller read ahead, by (store name, store id, execution id, step key): the step's
#: ledger result (or ``None``) and the store row, as ``read_store_and_step`` returns them.
KnownReads = dict[tuple[str, str, str, str], tuple[str | None, StoredState | None]]


@dataclass(frozen=True)
class CommitHook:
    """Database work of a caller's to commit with a mutation, in the commit's transaction.

    ``prepare(m)`` runs before the transaction opens, with the mutation about to be
    committed; it does any encoding or checking (it must not write) and returns the work
    to do once ``m`` is written, before the transaction commits. ``unwait`` names steps of
    the mutation's execution (it needs a step id) whose waiters the commit itself removes
    once it holds the store row (inside the commit function on PostgreSQL: no statement
    of its own). The transaction commits only if the mutation committed and the work did
    not raise: a conflict (which the core retries, preparing again), a recorded step or an
    exception rolls back the hook's writes too. An exception propagates to the store call.
    No user code may run in the work.

    ``reads`` holds rows the caller read ahead (a woken run's, with its lease): the store
    call's first read of a (store, step) found there is taken from it, once, instead of
    the database (``known_read``), as a remembered snapshot is: the commit compares, and
    whatever would end the call without a commit (a take finding nothing, user code
    raising) reads the store again, so the call never answers from a state older than
    itself. The ledger result must be one no one else can have recorded since (the step
    is the caller's, under its lease).

    ``deletion``, when given, is ``prepare`` for the deletions made in the context
    (``commit_deletion``): the work it returns commits in the deletion's transaction, and
    only if the store was deleted. Without it a deletion commits alone, as it always did.
    """

    prepare: Callable[[StoreMutation], Callable[[], None]]
    unwait: tuple[str, ...] = ()
    reads: KnownReads | None = None
    deletion: Callable[[StoreDeletion], Callable[[], None]] | None = None


#: The hook of the current context and the database alias it applies to.
current_hook: ContextVar[tuple[str, CommitHook] | None] = ContextVar(
    "yieldstar_commit_hook", default=None
)


class NotCommitted(Exception):
    """Rolls back a hooked commit that did not apply, carrying what it found."""

    def __init__(self, outcome: CommitOutcome) -> None:
        self.outcome = outcome
