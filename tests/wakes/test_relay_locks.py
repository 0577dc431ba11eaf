"""The relay holds no row lock of a wake intent while its ``WAKE_BACKEND`` publishes.

A publish is a network call to the broker: it can take seconds (Celery's broker timeouts),
or block for good with Celery's defaults when a Redis broker stops answering. Whatever
updates the intents of an execution in the relay's batch meanwhile (the statement that
takes the execution's lease acknowledges its due intents; so do a finished run,
``cancel_execution``, the admin's "deliver again", ``yieldstar_prune``) must not wait for
that call.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from tests.polling import HANG_SECONDS, join_or_fail
from tests.shared.fixtures import POSTGRES, BlockingBackend, configure
from yieldstar_django.models import Execution, WakeIntent
from yieldstar_django.runtime.leases import acquire_lease
from yieldstar_django.wakes import acknowledge, relay_once, schedule_wake


@pytest.mark.parametrize("alias", [POSTGRES], indirect=True)
@pytest.mark.parametrize("refused", [False, True], ids=["accepted", "refused"])
def test_a_relay_waiting_on_its_backend_holds_no_row_lock(alias: str, refused: bool) -> None:
    """While the relay's backend call blocks, from other connections: a worker takes the
    lease of an execution of its batch, a run acknowledges another's due intents, a
    finished execution acknowledges all of its own; each completes at once, before the
    backend returns. An intent acknowledged meanwhile stays acknowledged, and a refusal is
    recorded on the intents left pending only. (PostgreSQL: SQLite's relay already
    publishes outside any transaction.)"""
    past = timezone.now() - timedelta(seconds=1)
    executions = ["leased", "acked", "finished", "pending"]
    for execution_id in executions:
        Execution.objects.using(alias).create(id=execution_id, workflow_id="wf", input_json="{}")
        schedule_wake(execution_id, "wf", past, using=alias)
    backend = BlockingBackend(ConnectionError("broker gone") if refused else None)
    delivered: list[int] = []

    def relay() -> None:
        try:
            delivered.append(relay_once(using=alias))
        finally:
            connections.close_all()

    with configure(WAKE_BACKEND=backend, RELAY_INTERVAL=30):
        thread = threading.Thread(target=relay)
        thread.start()
        try:
            assert backend.entered.wait(HANG_SECONDS), "the relay never called its backend"
            # Each completes while the backend still blocks (it blocks until released, or
            # for BLOCK_SECONDS): none waited for a lock the relay holds.
            lease = acquire_lease("leased")
            acked = acknowledge("acked", using=alias)
            finished = acknowledge("finished", everything=True, using=alias)
            during = not backend.returned.is_set()
        finally:
            backend.release.set()
            join_or_fail(thread, what="the relay")
    assert during, "waited for the relay's backend"

    assert lease is not None and (acked, finished) == (1, 1)
    assert sorted(w.execution_id for w in backend.wakes) == sorted(executions)
    assert delivered == [0 if refused else len(executions)]
    intents = {i.execution_id: i for i in WakeIntent.objects.using(alias).filter(reason="timer")}
    for execution_id in ["leased", "acked", "finished"]:
        intent = intents[execution_id]
        assert intent.delivered_at is not None, f"{execution_id}: acknowledgement undone"
        assert intent.last_error == "", f"{execution_id}: a refusal recorded on it"
    left = intents["pending"]
    assert (left.delivered_at, left.attempts) == (None, 1)
    assert ("ConnectionError: broker gone" in left.last_error) is refused
    assert left.available_at > timezone.now(), "pushed back until its next delivery"
