"""The relay's claim (``outbox.claim_due``): it counts the delivery and pushes the intents
back, committed before the publish, so a relay that dies after it loses no wake, a second
relay does not deliver a batch being published, and a batch stays a few statements."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests.polling import HANG_SECONDS, join_or_fail
from tests.shared.fixtures import BlockingBackend, Spawn, WakeCollector, configure
from yieldstar_django.core.results import Wake
from yieldstar_django.models import WakeIntent
from yieldstar_django.wakes import relay_once, schedule_wake
from yieldstar_django.wakes.outbox import MAX_RETRY_DELAY, claim_due, redelivery_delay


def make_due(alias: str) -> None:
    WakeIntent.objects.using(alias).update(available_at=timezone.now() - timedelta(seconds=1))


def test_a_relay_that_dies_after_its_claim_loses_no_wake(
    alias: str, spawn: Spawn, wakes: WakeCollector
) -> None:
    """The relay process dies in its backend call: the claim stands (counted, pushed back),
    no other relay delivers the intent before the time it set, and one delivers it then."""
    schedule_wake("orphan", "wf", timezone.now() - timedelta(seconds=1), using=alias)
    backend = "tests.shared.workers.die_in_backend"
    spawn(
        "relay_then_die",
        [(alias,)],
        yieldstar={"WAKE_BACKEND": backend},
        barrier=False,
        expect_exit=19,
    )
    intent = WakeIntent.objects.using(alias).get()
    assert (intent.delivered_at, intent.attempts, intent.last_error) == (None, 1, "")
    assert intent.available_at > timezone.now(), "pushed back by the claim"
    assert relay_once(using=alias) == 0, "not delivered again before the claim's time"
    make_due(alias)
    assert relay_once(using=alias) == 1
    assert wakes == [Wake("orphan", "wf")]


def test_a_second_relay_does_not_deliver_a_batch_being_published(alias: str) -> None:
    """While one relay's backend call blocks, another relay's round neither waits for it
    nor delivers that batch again."""
    schedule_wake("busy", "wf", timezone.now() - timedelta(seconds=1), using=alias)
    backend = BlockingBackend()
    first: list[int] = []

    def relay() -> None:
        try:
            first.append(relay_once(using=alias))
        finally:
            connections.close_all()

    with configure(WAKE_BACKEND=backend):
        thread = threading.Thread(target=relay)
        thread.start()
        try:
            assert backend.entered.wait(HANG_SECONDS), "the relay never called its backend"
            second = relay_once(using=alias)
            during = not backend.returned.is_set()
        finally:
            backend.release.set()
            join_or_fail(thread, what="the first relay")
    assert (second, first, backend.calls) == (0, [1], 1)
    assert during, "the second relay waited for the first one's backend"


@pytest.mark.parametrize("deliveries", [0, 3, 30])
def test_the_claim_counts_a_delivery_and_pushes_back_by_the_redelivery_delay(
    alias: str, deliveries: int
) -> None:
    """PostgreSQL computes the delay in SQL, SQLite in Python: both as
    ``redelivery_delay`` says (doubling per delivery, at most ``MAX_RETRY_DELAY``)."""
    schedule_wake("e", "wf", timezone.now(), using=alias)
    WakeIntent.objects.using(alias).update(attempts=deliveries)
    make_due(alias)
    with configure(RELAY_DELAY=2, RELAY_INTERVAL=0.5):
        delay = redelivery_delay(deliveries, failed=False)
        before = timezone.now()
        claimed = claim_due(alias, 10)
        after = timezone.now()
    assert [(c.wake, c.deliveries) for c in claimed] == [(Wake("e", "wf"), deliveries)]
    assert delay == min(2 * 2**deliveries, MAX_RETRY_DELAY)
    intent = WakeIntent.objects.using(alias).get()
    assert intent.attempts == deliveries + 1
    pushed = intent.available_at - timedelta(seconds=delay)
    assert before - timedelta(milliseconds=1) <= pushed <= after + timedelta(milliseconds=1)
    assert claim_due(alias, 10) == [], "claimed: not due again before then"


@pytest.mark.parametrize("refused", [False, True], ids=["accepted", "refused"])
def test_a_batch_of_100_is_a_few_statements(
    alias: str, wakes: WakeCollector, refused: bool
) -> None:
    """A batch's claim, and the record of its refusal, are one statement per distinct
    delay at most (one claim statement on PostgreSQL), not one per intent."""
    at = timezone.now() - timedelta(seconds=1)
    for n in range(100):
        schedule_wake(f"e{n}", "wf", at, using=alias)
    ids = list(WakeIntent.objects.using(alias).order_by("id").values_list("id", flat=True))
    for deliveries in (1, 2):  # with the 40 never delivered, three distinct delays
        chunk = ids[30 * (deliveries - 1) : 30 * deliveries]
        WakeIntent.objects.using(alias).filter(id__in=chunk).update(attempts=deliveries)
    wakes.fail = ConnectionError("down") if refused else None
    with CaptureQueriesContext(connections[alias]) as queries:
        delivered = relay_once(using=alias, batch_size=100)
    assert delivered == (0 if refused else 100)
    table = WakeIntent._meta.db_table
    statements = [q["sql"] for q in queries.captured_queries if table in q["sql"]]
    assert len(statements) <= 8, statements  # transaction control aside
    left = WakeIntent.objects.using(alias).filter(delivered_at__isnull=True)
    assert left.count() == 100
    attempts = sorted(left.values_list("attempts", flat=True))
    assert attempts == [1] * 40 + [2] * 30 + [3] * 30, "each counted once"
    assert left.exclude(last_error="").count() == (100 if refused else 0)
