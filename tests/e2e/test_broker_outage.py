"""The broker goes down while mutations that wake executions commit: every wake is
delivered once it is back (the outbox and the relay), none is lost."""

from __future__ import annotations

import uuid

import pytest

from tests.e2e.workflows import push
from yieldstar_django.models import Execution, WakeIntent
from yieldstar_django.runtime import get_execution, start_workflow

from .conftest import E2E_MARKS, Env, wait_until

pytestmark = [*E2E_MARKS, pytest.mark.django_db(transaction=True)]


def test_wakes_committed_while_the_broker_is_down_are_delivered_after(services: Env) -> None:
    stores = [f"outage-{uuid.uuid4().hex[:8]}" for _ in range(10)]
    ids = [start_workflow("e2e.take_one", store_id) for store_id in stores]
    wait_until(
        "all to wait",
        lambda: Execution.objects.filter(pk__in=ids, status="waiting").count() == len(ids),
    )
    services.broker.down()
    try:
        for n, store_id in enumerate(stores):
            push(store_id, [f"v{n}"])  # commits; its on_commit hand-over fails
        # Wakes wait in the outbox, unacknowledged, for the relay. (A resume that was
        # already in a worker's hands may still run one execution meanwhile.)
        assert WakeIntent.objects.filter(
            execution_id__in=ids, reason="store", delivered_at__isnull=True
        ).exists()
    finally:
        services.broker.up()
    wait_until(
        "every execution to complete after the broker is back",
        lambda: Execution.objects.filter(pk__in=ids, status="completed").count() == len(ids),
        120,
    )
    assert [get_execution(eid).result for eid in ids] == [f"v{n}" for n in range(len(ids))]
