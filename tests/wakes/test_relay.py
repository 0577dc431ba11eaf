"""The relay: due intents, timers, failures, concurrency, the command and the beat task."""

from __future__ import annotations

import io
import logging
import os
import signal
import subprocess
import sys
import threading
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections, transaction
from django.test import override_settings
from django.utils import timezone

from tests.paths import ROOT
from tests.polling import HANG_SECONDS, join_or_fail
from tests.shared.fixtures import POSTGRES, WakeCollector, configure
from yieldstar_django.core.results import Wake
from yieldstar_django.models import WakeIntent
from yieldstar_django.tasks import relay_wakes
from yieldstar_django.wakes import (
    PendingWake,
    acknowledge,
    celery_backend,
    deliver_wakes,
    delivery,
    prune_delivered,
    relay_once,
    run_relay,
    schedule_wake,
    stop_on_signals,
    wake_now,
)
from yieldstar_django.wakes.outbox import claim_due


def pending(alias: str) -> list[str]:
    """The executions of the intents the relay would deliver now."""
    return list(
        WakeIntent.objects.using(alias)
        .filter(delivered_at__isnull=True, available_at__lte=timezone.now())
        .order_by("id")
        .values_list("execution_id", flat=True)
    )


def make_due(alias: str) -> None:
    WakeIntent.objects.using(alias).update(available_at=timezone.now() - timedelta(seconds=1))


def test_timers_are_delivered_when_due_and_once(alias: str, wakes: WakeCollector) -> None:
    now = timezone.now()
    schedule_wake("past", "wf", now - timedelta(seconds=5), using=alias)
    schedule_wake("future", "wf", now + timedelta(hours=1), using=alias)
    assert wakes == [], "a timer is never delivered on commit"
    assert relay_once(using=alias) == 1
    assert wakes == [Wake("past", "wf")]
    assert pending(alias) == []
    assert relay_once(using=alias) == 0
    with pytest.raises(ValueError, match="aware"):
        schedule_wake("naive", "wf", now.replace(tzinfo=None), using=alias)


def test_wake_now_follows_the_transaction(alias: str, wakes: WakeCollector) -> None:
    with transaction.atomic(using=alias):
        wake_now("a", "wf", using=alias)
        assert wakes == []
    assert wakes == [Wake("a", "wf")]
    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        wake_now("b", "wf", using=alias)
        raise RuntimeError
    assert wakes == [Wake("a", "wf")]
    assert list(WakeIntent.objects.using(alias).values_list("execution_id", flat=True)) == ["a"]
    assert pending(alias) == []


def test_relay_coalesces_wakes_of_one_execution(alias: str, wakes: WakeCollector) -> None:
    with configure(WAKE_BACKEND=wakes, RELAY_DELAY=0):
        wakes.fail = ConnectionError("down")
        for execution in ["x", "y", "x"]:
            wake_now(execution, "wf", using=alias)
        make_due(alias)
        wakes.fail = None
        assert relay_once(using=alias) == 3
    assert wakes == [Wake("x", "wf"), Wake("y", "wf")]
    assert pending(alias) == []


def test_failed_delivery_is_recorded_backed_off_and_retried(
    alias: str, wakes: WakeCollector
) -> None:
    schedule_wake("t", "wf", timezone.now() - timedelta(seconds=1), using=alias)
    wakes.fail = ConnectionError("broker down")
    with configure(WAKE_BACKEND=wakes, RELAY_INTERVAL=60):
        assert relay_once(using=alias) == 0
        intent = WakeIntent.objects.using(alias).get()
        assert (intent.attempts, intent.delivered_at) == (1, None)
        assert "ConnectionError: broker down" in intent.last_error
        assert intent.available_at > timezone.now() + timedelta(seconds=30), "backed off"
        assert relay_once(using=alias) == 0, "not retried before its new available_at"
        make_due(alias)
        wakes.fail = None
        assert relay_once(using=alias) == 1
    assert wakes == [Wake("t", "wf")]


def test_an_outage_logs_one_traceback_not_one_per_round(
    alias: str,
    wakes: WakeCollector,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A broker outage refuses every round's batch the same way: the first refusal is
    logged with its traceback, the same refusal again in one line (at RELAY_INTERVAL 0.5 s
    an outage of a minute logged 120 tracebacks); after a delivery succeeds, the next
    refusal has its traceback again."""
    caplog.set_level(logging.WARNING, logger="yieldstar_django.wakes")
    monkeypatch.setattr(delivery, "_last_refusal", None)  # a refusal of an earlier test
    wakes.fail = ConnectionError("broker down")

    def refusals() -> list[logging.LogRecord]:
        return [r for r in caplog.records if "wake backend failed" in r.getMessage()]

    with configure(WAKE_BACKEND=wakes, RELAY_INTERVAL=60):
        for _ in range(3):
            schedule_wake("t", "wf", timezone.now() - timedelta(seconds=1), using=alias)
            make_due(alias)
            assert relay_once(using=alias) == 0
        first, *again = refusals()
        assert first.exc_info is not None
        assert len(again) == 2
        assert all(r.exc_info is None for r in again), "one traceback per outage"
        assert all("ConnectionError: broker down" in r.getMessage() for r in again)
        wakes.fail = None
        make_due(alias)
        assert relay_once(using=alias) == 3  # the three intents refused before
        wakes.fail = ConnectionError("broker down")
        schedule_wake("u", "wf", timezone.now() - timedelta(seconds=1), using=alias)
        assert relay_once(using=alias) == 0
        assert refusals()[-1].exc_info is not None, "a new outage has its traceback"


def test_large_backlogs_go_in_batches(alias: str, wakes: WakeCollector) -> None:
    at = timezone.now() - timedelta(seconds=1)
    for n in range(25):
        schedule_wake(f"e{n}", "wf", at, using=alias)
    assert relay_once(using=alias, batch_size=10) == 25
    assert [w.execution_id for w in wakes] == [f"e{n}" for n in range(25)]


@pytest.mark.parametrize("batch_size", [0, -1, 10_001, True, 2.5, "100"])
def test_a_batch_size_it_cannot_use_is_refused_before_anything_is_claimed(
    alias: str, wakes: WakeCollector, batch_size: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``relay_once`` and ``prune_delivered`` take batches of 1 to 10,000 (one query
    parameter per intent when a batch is recorded). ``batch_size=0`` claimed nothing and
    never ended the round (0 < 0 is false), nor did -1 on SQLite (``LIMIT -1``: every
    intent); the spy ends such a loop after a few claims instead of hanging."""
    from yieldstar_django.wakes import relay

    schedule_wake("kept", "wf", timezone.now() - timedelta(seconds=1), using=alias)
    claims: list[int] = []

    def counted_claim(using: str, limit: int) -> Any:
        claims.append(limit)
        if len(claims) > 3:
            raise AssertionError(f"the round claimed {len(claims)} times and went on")
        return claim_due(using, limit)

    monkeypatch.setattr(relay, "claim_due", counted_claim)
    with pytest.raises(ValueError, match="batch_size"):
        relay_once(using=alias, batch_size=batch_size)
    with pytest.raises(ValueError, match="batch_size"):
        prune_delivered(older_than=0, using=alias, batch_size=batch_size)
    assert claims == [] and wakes == []
    intent = WakeIntent.objects.using(alias).get(execution_id="kept")
    assert (intent.attempts, intent.delivered_at) == (0, None)


@pytest.mark.parametrize("alias", [POSTGRES], indirect=True)
def test_concurrent_relays_skip_claimed_intents(alias: str, wakes: WakeCollector) -> None:
    """A batch claimed by one relay (``FOR UPDATE SKIP LOCKED``) is invisible to another,
    and once the claim commits it is not due again before the time the claim set."""
    schedule_wake("claimed", "wf", timezone.now() - timedelta(seconds=1), using=alias)
    other: list[int] = []

    def second_relay() -> None:
        try:
            other.append(relay_once(using=alias))
        finally:
            connections.close_all()

    with transaction.atomic(using=alias):
        assert [p.wake.execution_id for p in claim_due(alias, 10)] == ["claimed"]
        thread = threading.Thread(target=second_relay)
        thread.start()
        join_or_fail(thread, what="the thread")
    assert other == [0]
    assert wakes == []
    assert relay_once(using=alias) == 0, "pushed back by the claim"
    make_due(alias)
    assert relay_once(using=alias) == 1


def test_deliver_wakes_never_raises(alias: str, wakes: WakeCollector) -> None:
    wakes.fail = RuntimeError("nope")
    assert deliver_wakes([PendingWake(123456, Wake("e", "wf"))], using=alias) is False
    wakes.fail = None
    assert deliver_wakes([PendingWake(123456, Wake("e", "wf"))], using=alias) is True


def test_run_relay_stops_when_asked(alias: str, wakes: WakeCollector) -> None:
    schedule_wake("r", "wf", timezone.now() - timedelta(seconds=1), using=alias)
    stop = threading.Event()
    stop.set()
    assert run_relay(using=alias, stop=stop, interval=0.01) == 1
    assert run_relay(using=alias, once=True) == 0


def test_sigterm_stops_the_relay_after_the_batch_in_progress(alias: str) -> None:
    """A SIGTERM (or SIGINT) during a round with a backlog stops the relay once the batch
    being published is done, not once the whole backlog is: a relay that must stop (a
    deploy, a pod's grace period) does not go on delivering, or failing to deliver to a
    broker that is down, batch after batch until it is killed."""
    at = timezone.now() - timedelta(seconds=1)
    for n in range(250):
        schedule_wake(f"b{n}", "wf", at, using=alias)
    published: list[int] = []

    def terminated_while_publishing(batch: list[Wake]) -> None:
        published.append(len(batch))
        if len(published) == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # the handler runs before this returns

    stop = threading.Event()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        stop_on_signals(stop)
        with configure(WAKE_BACKEND=terminated_while_publishing):
            delivered = run_relay(using=alias, stop=stop, interval=0.01)
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    assert stop.is_set()
    assert (delivered, published) == (100, [100])
    untouched = WakeIntent.objects.using(alias).filter(attempts=0, delivered_at__isnull=True)
    assert untouched.count() == 150, "the rest of the backlog is left for the next relay"


def test_relay_command_once(alias: str, wakes: WakeCollector) -> None:
    schedule_wake("cmd", "wf", timezone.now() - timedelta(seconds=1), using=alias)
    with pytest.raises(Exception, match="interval"):
        call_command("yieldstar_relay", "--database", alias, "--interval", "0")
    out = io.StringIO()
    call_command("yieldstar_relay", "--database", alias, "--once", stdout=out)
    assert "delivered 1 wake intent(s)" in out.getvalue()
    assert wakes == [Wake("cmd", "wf")]


def test_relay_command_once_fails_when_its_round_fails(
    alias: str, wakes: WakeCollector, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--once`` is for cron: a round that failed (the database gone, say) must exit
    non-zero rather than report "delivered 0 wake intent(s)"."""
    from django.db import OperationalError

    from yieldstar_django.wakes import relay

    def gone(**kwargs: object) -> int:
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(relay, "relay_once", gone)
    out = io.StringIO()
    with pytest.raises(CommandError, match="server closed the connection"):
        call_command("yieldstar_relay", "--database", alias, "--once", stdout=out)
    assert "delivered" not in out.getvalue()


@pytest.mark.parametrize("interval", ["nan", "inf", "-inf", "1e12"])
def test_relay_command_refuses_an_interval_it_cannot_sleep(interval: str) -> None:
    """``nan`` would poll in a tight loop (``Event.wait(nan)`` returns at once), ``inf``
    and huge values crash after the first round (``OverflowError``)."""
    with pytest.raises(CommandError, match="--interval"):
        call_command("yieldstar_relay", "--once", "--interval", interval)


def test_beat_task_runs_one_round(alias: str, wakes: WakeCollector) -> None:
    from celery import current_app

    schedule_wake("beat", "wf", timezone.now() - timedelta(seconds=1), using=alias)
    assert "yieldstar_django.relay_wakes" in current_app.tasks
    assert relay_wakes.run(using=alias) == 1
    assert wakes == [Wake("beat", "wf")]


@pytest.mark.parametrize("alias", [POSTGRES], indirect=True)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
@pytest.mark.slow
def test_relay_command_stops_cleanly_on_signals(alias: str, signum: int) -> None:
    """The long-lived command, in its own process, exits 0 after SIGTERM or SIGINT."""
    s = connections[alias].settings_dict
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONUNBUFFERED": "1",
        "DATABASE_URL": f"postgres://{s['USER']}@{s['HOST']}:{s['PORT'] or 5432}/{s['NAME']}",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "django", "yieldstar_relay", "--interval", "0.05"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert "yieldstar relay on 'default'" in first, (
            process.stderr.read() if process.stderr else ""
        )
        process.send_signal(signum)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert "delivered 0 wake intent(s)" in out


#: A Redis result backend (the machine's Redis), whatever the broker.
REDIS_RESULTS = "redis://127.0.0.1:6379/15"


@pytest.mark.celery
@pytest.mark.slow
def test_celery_backend_enqueues_resume_execution_on_a_real_broker() -> None:
    """The default backend publishes ``yieldstar_django.resume_execution(execution_id)``;
    read back from Redis (a private queue, no worker consumes it). It waits for no result:
    with a Redis result backend, a send that expects one subscribes the producer to the
    task's result channel (a round trip per wake, and a subscription never released)."""
    import uuid

    from celery import Celery, _state
    from kombu import Connection

    url = settings.CELERY_BROKER_URL
    try:
        with Connection(url, connect_timeout=2) as probe:
            probe.ensure_connection(max_retries=1)
    except Exception as exc:  # pragma: no cover - depends on the machine
        pytest.skip(f"needs a Celery broker at {url}: {exc}")
    queue = f"yieldstar-test-{uuid.uuid4().hex}"
    app = Celery("yieldstar-test", broker=url, backend=REDIS_RESULTS, set_as_current=False)
    app.conf.task_default_queue = queue
    app.conf.broker_connection_retry_on_startup = True
    previous = _state.get_current_app()
    app.set_current()
    try:
        with override_settings(YIELDSTAR={"PUBLISH_IN_TESTS": True}):  # a private queue
            celery_backend([Wake("exec-1", "wf"), Wake("exec-2", "wf")])
        received = []
        with Connection(url) as conn:
            simple = conn.SimpleQueue(queue)
            for _ in range(2):
                message = simple.get(timeout=HANG_SECONDS)

                received.append((message.headers["task"], message.payload[0]))
                assert message.headers["ignore_result"] is True
                message.ack()
            simple.queue.delete()
            simple.close()
        assert app.backend.result_consumer._pubsub is None, "subscribed to a result"
    finally:
        _state._set_current_app(previous)
        app.close()
    assert received == [
        ("yieldstar_django.resume_execution", ["exec-1"]),
        ("yieldstar_django.resume_execution", ["exec-2"]),
    ]


def test_a_delivered_wake_is_delivered_again_until_acknowledged(
    alias: str, wakes: WakeCollector
) -> None:
    """Handing a wake to the broker is not the end of it: a worker that took the message
    and died never ran the execution, so the relay delivers it again, with a growing
    delay, until a run acknowledges it."""
    with configure(WAKE_BACKEND=wakes, RELAY_DELAY=5, RELAY_INTERVAL=1):
        wake_now("lost", "wf", using=alias)
        assert wakes == [Wake("lost", "wf")], "handed over on commit"
        assert relay_once(using=alias) == 0, "not before RELAY_DELAY"
        delays = []
        for _ in range(3):
            make_due(alias)
            before = timezone.now()
            assert relay_once(using=alias) == 1
            intent = WakeIntent.objects.using(alias).get()
            delays.append(round((intent.available_at - before).total_seconds()))
        assert delays == [5, 10, 20], "RELAY_DELAY doubled per delivery"
        assert wakes == [Wake("lost", "wf")] * 4
        assert acknowledge("lost", using=alias) == 1
        make_due(alias)
        assert relay_once(using=alias) == 0, "an acknowledged intent is done"


def test_acknowledge_takes_due_intents_only(alias: str, wakes: WakeCollector) -> None:
    """A run satisfies the wakes due when it starts, not a timer due later, and not
    another execution's; a finished execution acknowledges everything."""
    now = timezone.now()
    wake_now("e", "wf", using=alias)
    schedule_wake("e", "wf", now - timedelta(seconds=1), reason="sleep", using=alias)
    schedule_wake("e", "wf", now + timedelta(hours=1), reason="sleep", using=alias)
    wake_now("other", "wf", using=alias)
    assert acknowledge("e", using=alias) == 2
    left = WakeIntent.objects.using(alias).filter(delivered_at__isnull=True)
    assert sorted(left.values_list("execution_id", "reason")) == [
        ("e", "sleep"),
        ("other", "wake"),
    ]
    assert acknowledge("e", everything=True, using=alias) == 1
    assert list(left.values_list("execution_id", flat=True)) == ["other"]


def test_the_count_line_says_how_long_it_counted(
    alias: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The once-a-minute line is written after a round, so it may cover more than a minute
    (a round through a large backlog, ``--interval 300``): it says how long it covered,
    not always "last 60s", or the rate an operator reads from it is wrong."""
    import logging
    import time

    from yieldstar_django.wakes.relay_log import RelayCounts

    counts = RelayCounts(using=alias)
    counts._last = time.monotonic() - 300
    counts.add(delivered=600)
    caplog.set_level(logging.INFO, logger="yieldstar_django.relay")
    assert counts.maybe_report()
    (line,) = [r.getMessage() for r in caplog.records if "delivered=" in r.getMessage()]
    assert "delivered=600 failed=0" in line and "last 300s" in line, line


def test_a_streak_of_failed_rounds_logs_one_traceback(
    alias: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While there is no database (a restart, a failover), every round fails: the relay
    logs the first failure with its traceback, a short line every
    ``FAILING_REPORT_SECONDS`` after, and a line when a round succeeds again, not a
    traceback per round (one every ``RELAY_INTERVAL``)."""
    from django.db import OperationalError

    from yieldstar_django.wakes import relay

    rounds = iter([*[OperationalError("no primary")] * 6, 0, OperationalError("again"), 0])
    stop = threading.Event()
    clock = [100.0]

    def fake_round(**kwargs: object) -> int:
        clock[0] += 3.0  # each round 3 s later: a report after the 10 s
        outcome = next(rounds, None)
        if outcome is None:
            stop.set()
            return 0
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    monkeypatch.setattr(relay, "relay_once", fake_round)
    monkeypatch.setattr(relay, "_clock", lambda: clock[0])
    errors: list[BaseException] = []
    with caplog.at_level(logging.INFO, logger="yieldstar_django.wakes"):
        relay.run_relay(using=alias, stop=stop, interval=0, on_error=errors.append)
    lines = [(r.getMessage(), r.exc_info is not None) for r in caplog.records]
    assert len(errors) == 7  # every failure still reaches on_error
    assert [m for m, tb in lines if tb] == ["relay round failed", "relay round failed"]
    assert "relay rounds still failing: 5 in a row over 12.0s; the last: no primary" in [
        m for m, _ in lines
    ]
    assert [m for m, _ in lines if "succeed again" in m] == [
        "relay rounds succeed again after 6 failed round(s) over 18.0s",
        "relay rounds succeed again after 1 failed round(s) over 3.0s",
    ]
