"""``Retries``: the attempts of one write of the CAS loop (:mod:`.cas`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from typing import Any

from .commits import RetryPolicy
from .definition import StoreDefinition
from .errors import StoreContentionError
from .results import StoreStepId

__all__ = ["Retries"]

Queue = Callable[[StoreDefinition, str, StoreStepId | None], AbstractContextManager[None]]


class Retries:
    """The attempts of one write: the retry cap, jittered backoff, and after
    ``policy.queue_after`` lost races the store's ``queue`` (a connector's context in which
    the next attempt cannot lose: on PostgreSQL a transaction that locks the row first),
    held until the write ends; the write reads again in it and retries at once. ``step_id``
    is the write's step, if any (passed to ``queue``)."""

    def __init__(
        self,
        policy: RetryPolicy,
        queue: Queue,
        definition: StoreDefinition,
        id: str,
        step_id: StoreStepId | None = None,
    ) -> None:
        self.policy, self.queue, self.definition, self.id = policy, queue, definition, id
        self.step_id = step_id
        self.attempts = 0
        self._held = ExitStack()
        self._queued = False

    def __enter__(self) -> Retries:
        return self

    def __exit__(self, *exc: Any) -> None:
        # The queue may be a transaction: it must see the exception to roll back.
        self._held.__exit__(*exc)

    def wait(self) -> bool:
        """Raise ``StoreContentionError`` at the cap; else back off, or enter the queue.
        True if it waited (so whatever the caller read before is stale)."""
        policy = self.policy
        if self.attempts >= policy.max_attempts:
            raise StoreContentionError(self.definition.name, self.id, self.attempts)
        if policy.queue_after and self.attempts >= policy.queue_after:
            if self._queued:
                return False
            self._queued = True
            self._held.enter_context(self.queue(self.definition, self.id, self.step_id))
            return True
        delay = policy.delay(self.attempts)
        if delay > 0:
            time.sleep(delay)
            return True
        return False
