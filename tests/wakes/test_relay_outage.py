"""The relay during a broker outage, with the Celery wake backend and a real broker that
refuses connections (a closed port) or accepts them and never answers (a hung Redis)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from celery import Celery, _state
from django.db.models import Sum
from django.utils import timezone

from tests.shared.fixtures import POSTGRES, configure
from yieldstar_django.models import WakeIntent
from yieldstar_django.wakes import relay_once, schedule_wake

#: Short broker timeouts, in the spirit of docs/howto/run-workers.md (2 s there), so a
#: publish to a broker that does not answer fails in about a second.
TIMEOUTS = {
    "broker_transport_options": {"socket_timeout": 0.5, "socket_connect_timeout": 0.5},
    "task_publish_retry_policy": {"max_retries": 0},
}


def closed_port() -> str:
    """A Redis URL on a port nothing listens on (connections are refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"


@contextlib.contextmanager
def unanswering_port() -> Iterator[str]:
    """A Redis URL whose server accepts connections and never answers (a paused Redis)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
    finally:
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        for sock in accepted:
            sock.close()


@contextlib.contextmanager
def celery_on(url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The Celery backend publishing through a project app on ``url``."""
    monkeypatch.setenv("CELERY_BROKER_URL", url)  # Celery prefers it to ``broker_url``
    app = Celery("relay-outage", set_as_current=False)
    app.conf.broker_url = url
    assert app.conf.broker_url == url
    app.conf.update(TIMEOUTS)
    previous = _state.get_current_app()
    app.set_current()
    try:
        # PUBLISH_IN_TESTS: the broker is down, nothing can reach a worker.
        with configure(WAKE_BACKEND="yieldstar_django.wakes.celery_backend", PUBLISH_IN_TESTS=True):
            yield
    finally:
        _state._set_current_app(previous)
        app.close()


def backlog(alias: str, count: int) -> None:
    at = timezone.now() - timedelta(seconds=1)
    for n in range(count):
        schedule_wake(f"e{n}", "wf", at, using=alias)


def tried(alias: str) -> tuple[int, int]:
    """(intents delivered at least once, deliveries counted on all of them)."""
    intents = WakeIntent.objects.using(alias)
    total = intents.aggregate(n=Sum("attempts"))["n"] or 0
    return intents.filter(attempts__gt=0).count(), total


def test_a_round_stops_at_the_first_batch_a_refusing_broker_refuses(
    alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the broker down, every batch of a backlog fails the same way: a round tries
    one, records it and ends (the rest waits for the next round), instead of calling the
    broker once per batch of the backlog each round."""
    backlog(alias, 30)
    with celery_on(closed_port(), monkeypatch):
        assert relay_once(using=alias, batch_size=10) == 0
    assert tried(alias) == (10, 10)
    assert WakeIntent.objects.using(alias).filter(attempts=0).count() == 20


@pytest.mark.parametrize("alias", [POSTGRES], indirect=True)
def test_a_round_ends_when_the_broker_hangs(alias: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A broker that does not answer costs a round one publish timeout, not one per batch
    of the backlog: before, the batches refused first came due again (``RELAY_INTERVAL``,
    doubling) while the others timed out, and the round went on until their backoff
    outgrew a pass over the backlog (for ever past about 75 batches with 4 s timeouts):
    no count line and no upkeep meanwhile."""
    backlog(alias, 40)
    with unanswering_port() as url, celery_on(url, monkeypatch), configure(RELAY_INTERVAL=0.1):
        start = time.monotonic()
        assert relay_once(using=alias, batch_size=10) == 0
        took = time.monotonic() - start
    assert tried(alias) == (10, 10), f"the round took {took:.1f}s"
