"""A lease's takeover goes before the wakes already queued, and is delivered again sooner.

- The relay marks the wakes of takeover timers (``Wake.takeover``) and pushes such an
  intent back by ``RELAY_INTERVAL`` (doubling), not ``RELAY_DELAY``: a consumer that took
  the message and stopped (SIGSTOP) does not hold the rescue for long.
- The Celery backend publishes a takeover with the broker's highest priority: on a real
  Redis (kombu's priority lists) and a real RabbitMQ (a queue with ``x-max-priority``),
  a takeover published after ordinary wakes is consumed first.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any

import pytest
from celery import Celery
from django.utils import timezone

from tests.shared.fixtures import configure
from yieldstar_django.celery_app import current_app
from yieldstar_django.core.results import Wake
from yieldstar_django.models import WakeIntent
from yieldstar_django.wakes import celery_backend, relay_once
from yieldstar_django.wakes.outbox import TAKEOVER_REASON, schedule_wake

RABBITMQ = ("127.0.0.1", 5672)


class Collector(list[Wake]):
    """A ``WAKE_BACKEND`` that keeps the wakes as given (takeover flag included)."""

    def __call__(self, wakes: Sequence[Wake]) -> None:
        self.extend(wakes)


def test_the_relay_marks_takeovers_and_delivers_them_again_sooner(alias: str) -> None:
    collector = Collector()
    due = timezone.now() - timedelta(seconds=1)
    with configure(WAKE_BACKEND=collector, RELAY_DELAY=60.0, RELAY_INTERVAL=0.5):
        takeover = schedule_wake("e-lease", "wf", due, reason=TAKEOVER_REASON, using=alias)
        timer = schedule_wake("e-timer", "wf", due, reason="timer", using=alias)
        before = timezone.now()
        assert relay_once(using=alias) == 2
        after = timezone.now()
    assert sorted((w.execution_id, w.takeover) for w in collector) == [
        ("e-lease", True),
        ("e-timer", False),
    ]
    rows = {i.pk: i for i in WakeIntent.objects.using(alias).filter(pk__in=[takeover, timer])}
    # Pushed back by the delay of the first redelivery: RELAY_INTERVAL for the takeover.
    lease_back = rows[takeover].available_at
    assert before + timedelta(seconds=0.5) <= lease_back <= after + timedelta(seconds=0.5)
    assert rows[timer].available_at >= before + timedelta(seconds=60)


def _broker_url(kind: str) -> str:
    if kind == "redis":
        url = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/8")
        if not url.startswith("redis://"):
            pytest.skip("CELERY_BROKER_URL names no Redis broker")
        return url
    with socket.socket() as probe:
        probe.settimeout(1)
        if probe.connect_ex(RABBITMQ) != 0:
            pytest.skip("RabbitMQ is not reachable at 127.0.0.1:5672")
    return "amqp://guest:guest@127.0.0.1:5672//"


@pytest.fixture(params=["redis", "amqp"])
def broker_app(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A project Celery app on a real broker, with a queue of its own (declared with
    priorities, as ``task_queue_max_priority`` makes Celery do), made current."""
    monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
    url = _broker_url(request.param)
    queue = f"ys-priority-{uuid.uuid4().hex[:8]}"
    previous = current_app()
    app = Celery("project", broker=url, set_as_current=False)
    app.conf.update(
        task_default_queue=queue,
        task_queue_max_priority=10,
        broker_connection_retry_on_startup=True,
        broker_transport_options={"socket_timeout": 5, "socket_connect_timeout": 5},
    )
    app.set_current()
    with app.connection_for_write() as connection:
        app.amqp.queues[queue](connection.default_channel).declare()
    try:
        yield app, queue
    finally:
        with app.connection_for_write() as connection:
            app.amqp.queues[queue](connection.default_channel).delete()
        previous.set_current()


def _consumed(app: Celery, queue: str, count: int) -> list[str]:
    """The execution ids of the next ``count`` messages of ``queue``, in the order a
    worker gets them."""
    ids = []
    with app.connection_for_read() as connection:
        bound = app.amqp.queues[queue](connection.default_channel)
        for _ in range(count):
            message = bound.get(no_ack=True)
            assert message is not None, f"only {len(ids)} messages in the queue"
            args = message.decode()[0]
            ids.append(args[0])
    return ids


def test_a_takeover_is_consumed_before_the_wakes_queued_earlier(broker_app: Any) -> None:
    app, queue = broker_app
    with configure(PUBLISH_IN_TESTS=True):
        celery_backend([Wake("first", "wf"), Wake("second", "wf")])
        celery_backend([Wake("rescue", "wf", takeover=True)])
        celery_backend([Wake("third", "wf")])
    assert _consumed(app, queue, 4) == ["rescue", "first", "second", "third"]
