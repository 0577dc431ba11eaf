"""The Celery wake backend under configurations Django projects use: a project's own
Celery signal receivers, a broker that stops answering."""

from __future__ import annotations

import contextlib
import re
import socket
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from celery import Celery

from tests.paths import ROOT
from tests.shared.fixtures import BOTH, POSTGRES, Spawn
from yieldstar_django.models import WakeIntent

CELERY = {"WAKE_BACKEND": "yieldstar_django.wakes.celery_backend"}
REDIS = "redis://127.0.0.1:6379/11"
#: The broker settings ``docs/howto/run-workers.md`` recommends (``CELERY_`` + upper case).
DOCUMENTED_CELERY = {
    "broker_transport_options": {"socket_timeout": 2, "socket_connect_timeout": 2},
    "task_publish_retry_policy": {"max_retries": 1, "interval_start": 0, "interval_step": 0.2},
}
#: How long the unanswering broker of the test below hangs before it goes away.
HUNG = 12.0


@pytest.mark.parametrize("alias", [POSTGRES], indirect=True)
def test_a_publish_signal_receiver_that_queries_does_not_deadlock_the_commit(
    alias: str, spawn: Spawn
) -> None:
    """A ``before_task_publish`` receiver of the project that reads the database (on the
    connection that is committing) must not hang the store write."""
    (took,) = spawn(
        "wake_with_project_app",
        [(alias, "audited", REDIS, True)],
        yieldstar=CELERY,
        barrier=False,
        timeout=20,
    )
    assert took < 5
    assert WakeIntent.objects.using(alias).filter(execution_id="e").count() == 1


@pytest.fixture
def unanswering_broker() -> Iterator[str]:
    """A broker that accepts connections and never answers (a hung Redis, a half-open
    connection) for ``HUNG`` seconds, then goes away (whoever still waits on it gets an
    error: the test ends without waiting for a stuck child)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                return

    def go_away() -> None:
        stop.set()
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        for sock in accepted:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    threading.Thread(target=accept, daemon=True).start()
    timer = threading.Timer(HUNG, go_away)
    timer.start()
    try:
        yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
    finally:
        timer.cancel()
        if not stop.is_set():
            go_away()


@pytest.mark.parametrize("alias", BOTH, indirect=True)
@pytest.mark.xfail(
    strict=True,
    reason="Known: with Celery's defaults a Redis broker has no socket timeout, so a "
    "publish to one that stops answering blocks the committing request indefinitely "
    "(yieldstar.W005 warns of that configuration).",
)
@pytest.mark.slow
def test_a_broker_that_does_not_answer_does_not_hang_the_commit(
    alias: str, spawn: Spawn, unanswering_broker: str
) -> None:
    """The wake stays in the outbox for the relay; the write returns in bounded time."""
    (took,) = spawn(
        "wake_with_project_app",
        [(alias, "hung", unanswering_broker, False)],
        yieldstar=CELERY,
        barrier=False,
        timeout=60,
    )
    assert took < HUNG - 2, f"the write waited {took:.1f}s, until the broker went away"
    intent = WakeIntent.objects.using(alias).get(execution_id="e")
    assert intent.delivered_at is None


@pytest.mark.parametrize("alias", BOTH, indirect=True)
def test_a_project_app_publishes_the_wake(alias: str, spawn: Spawn) -> None:
    """The baseline of the tests above: the project's app, a broker that answers."""
    (took,) = spawn(
        "wake_with_project_app",
        [(alias, "plain", REDIS, False)],
        yieldstar=CELERY,
        barrier=False,
        timeout=20,
    )
    assert took < 5
    assert WakeIntent.objects.using(alias).filter(execution_id="e").count() == 1


@pytest.mark.parametrize("alias", BOTH, indirect=True)
@pytest.mark.slow
def test_with_the_documented_timeouts_a_broker_that_does_not_answer_costs_seconds(
    alias: str, spawn: Spawn, unanswering_broker: str
) -> None:
    """``docs/howto/run-workers.md``: the broker settings it recommends bound the write."""
    (took,) = spawn(
        "wake_with_project_app",
        [(alias, "bounded", unanswering_broker, False, DOCUMENTED_CELERY)],
        yieldstar=CELERY,
        barrier=False,
        timeout=60,
    )
    assert took < 5, "two tries of 2 s"
    intent = WakeIntent.objects.using(alias).get(execution_id="e")
    assert (intent.delivered_at, intent.attempts) == (None, 1)
    assert "Timeout" in intent.last_error


#: The pages that show a Celery beat schedule for yieldstar's beat tasks.
BEAT_PAGES = ("docs/operations/relay.md", "docs/operations/retention.md")
BEAT_TASKS = {"yieldstar_django.relay_wakes", "yieldstar_django.prune_executions"}


def documented_beat_blocks(page: str) -> list[str]:
    """The Python blocks of ``page`` that configure a beat schedule."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / page).read_text(), re.DOTALL)
    return [block for block in blocks if "beat_schedule" in block.lower()]


def test_the_documented_beat_schedules_add_up_in_one_place() -> None:
    """Celery has one beat schedule. The relay's page schedules ``relay_wakes`` and the
    retention page ``prune_executions``: a project that runs both on beat follows both.
    Each must therefore add its entry to the same setting, ``CELERY_BEAT_SCHEDULE`` (which
    ``config_from_object(..., namespace="CELERY")`` reads as ``beat_schedule``); an
    ``app.conf.beat_schedule = {...}`` in the Celery module replaces that setting's whole
    schedule, and the relay (every durable timer, every lease takeover) silently stops."""
    entries: dict[str, Any] = {}
    for page in BEAT_PAGES:
        blocks = documented_beat_blocks(page)
        assert blocks, f"{page} shows no beat schedule"
        for block in blocks:
            assert "app.conf" not in block, f"{page}: replaces the schedule from the Celery module"
            settings_module: dict[str, Any] = {}
            exec(block, settings_module)  # a settings fragment: no Celery app in scope
            schedule = settings_module.get("CELERY_BEAT_SCHEDULE")
            assert isinstance(schedule, dict), f"{page}: not the CELERY_BEAT_SCHEDULE setting"
            assert not set(schedule) & set(entries), f"{page}: an entry of another page's name"
            entries.update(schedule)
    app = Celery("beat-docs", set_as_current=False)
    app.config_from_object(SimpleNamespace(CELERY_BEAT_SCHEDULE=entries), namespace="CELERY")
    assert {entry["task"] for entry in app.conf.beat_schedule.values()} == BEAT_TASKS
