"""The unconfigured-Celery-app trap: the Celery wake backend refuses to publish with
Celery's default app (the relay keeps the intent and retries it), the W003 check, and the
relay's startup and per-minute log lines."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
from celery import Celery, _state, signals
from django.utils import timezone

from tests.shared.fixtures import configure
from yieldstar_django.celery_app import (
    UnconfiguredCeleryApp,
    describe_app,
    masked_broker_url,
    require_configured_app,
)
from yieldstar_django.checks import check_celery_app
from yieldstar_django.models import WakeIntent
from yieldstar_django.wakes import (
    celery_backend,
    enqueues_only,
    is_enqueue_only,
    relay_log,
    relay_once,
    run_relay,
    schedule_wake,
)


@contextmanager
def current(app: Celery | None) -> Iterator[None]:
    """Make ``app`` Celery's current app (``None``: as if no app had been created, so
    Celery makes up its fallback ``"default"`` app)."""
    previous, previous_default = _state.get_current_app(), _state.default_app
    if app is None:
        _state.set_default_app(None)
    _state._set_current_app(app)
    try:
        yield
    finally:
        _state._set_current_app(previous)
        _state.set_default_app(previous_default)


def test_default_app_is_refused_and_a_created_one_accepted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CELERY_BROKER_URL", raising=False)  # it would override broker=
    with current(None), pytest.raises(UnconfiguredCeleryApp, match="never imported"):
        require_configured_app()
    app = Celery("proj", broker="redis://user:s3cret@127.0.0.1:6379/9", set_as_current=False)
    with current(app):
        assert require_configured_app() is app
    assert masked_broker_url(app) == "redis://user:**@127.0.0.1:6379/9"
    assert "'proj'" in describe_app(app)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        # Celery's documented Redis Sentinel URL: the relay used to crash at startup on it.
        (
            "sentinel://localhost:26379;sentinel://localhost:26380",
            "sentinel://localhost:26379/;sentinel://localhost:26380/",
        ),
        (
            "redis://:s3cret@a:6379/0;redis://:t0psecret@b:6379/0",
            "redis://:**@a:6379/0;redis://:**@b:6379/0",
        ),
        (["amqp://u:s3cret@a//", "amqp://u:t0psecret@b//"], "amqp://u:**@a//;amqp://u:**@b//"),
        ("redis://:s3cret@a:notaport/0", "redis://(a URL that does not parse, not shown)"),
    ],
    ids=["sentinel-failover", "failover-string", "failover-list", "unparsable"],
)
def test_every_url_of_a_failover_broker_is_masked(
    url: str | list[str],
    shown: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each URL of a failover broker (``;``-separated or a list, as Celery accepts) is
    masked on its own; a URL that does not parse is not shown. The relay's startup line
    uses it, so it must never raise."""
    monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
    app = Celery("proj", broker=url, set_as_current=False)
    assert masked_broker_url(app) == shown
    caplog.set_level(logging.INFO, logger="yieldstar_django.relay")
    with configure(WAKE_BACKEND=celery_backend), current(app):
        relay_log.log_startup("default")
    [line] = [r.getMessage() for r in caplog.records if "'proj'" in r.getMessage()]
    assert shown in line and "s3cret" not in line and "t0psecret" not in line


def test_an_app_made_the_default_is_the_projects_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """``app.set_default()`` (as the end-to-end suite's producer does) is not the trap."""
    monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
    previous = _state.default_app
    app = Celery("proj", broker="redis://127.0.0.1:6379/9", set_as_current=False)
    app.set_default()
    try:
        with current(app):
            assert require_configured_app() is app
    finally:
        _state.set_default_app(previous)


def test_a_project_app_named_default_is_the_projects_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """A project may name its app ``Celery("default")``; Celery's Django fixup makes it the
    default app when it is the first one (as it makes any project app). It is not Celery's
    unconfigured fallback, which Celery makes up itself, also named ``"default"``: the
    wakes must go out, and W003 must not warn."""
    monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
    previous = _state.default_app
    _state.set_default_app(None)
    app = Celery("default", broker="redis://127.0.0.1:6379/9", set_as_current=False)
    try:
        assert _state.default_app is app  # made default by the Django fixup
        with current(app):
            assert require_configured_app() is app
            with configure(WAKE_BACKEND=celery_backend):
                assert check_celery_app() == []
    finally:
        _state.set_default_app(previous)


@pytest.mark.django_db(transaction=True, databases=["default"])
def test_relay_leaves_the_intent_undelivered_with_the_default_app() -> None:
    schedule_wake("e-trap", "wf", timezone.now() - timedelta(seconds=1))
    with configure(WAKE_BACKEND=celery_backend), current(None):
        assert relay_once() == 0
    intent = WakeIntent.objects.get(execution_id="e-trap")
    assert intent.delivered_at is None
    assert intent.attempts == 1
    assert "unconfigured default app" in intent.last_error


def test_w003_check() -> None:
    app = Celery("proj", set_as_current=False)
    with configure(WAKE_BACKEND=celery_backend):
        with current(None):
            assert [m.id for m in check_celery_app()] == ["yieldstar.W003"]
        with current(app):
            assert check_celery_app() == []
    with configure(WAKE_BACKEND="tests.shared.workers.discard_wakes"), current(None):
        assert check_celery_app() == []


@pytest.mark.django_db(transaction=True, databases=["default"])
def test_relay_logs_startup_and_counts(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
    app = Celery("proj", broker="redis://user:s3cret@127.0.0.1:6379/9", set_as_current=False)
    relay_log.counts.using = "default"  # another test's relay may have left another alias
    relay_log.counts.maybe_report(force=True)  # start counting from zero
    caplog.clear()
    caplog.set_level(logging.INFO, logger="yieldstar_django.relay")
    schedule_wake("e-refused", "wf", timezone.now() - timedelta(seconds=1))
    with configure(WAKE_BACKEND=celery_backend), current(None):
        run_relay(once=True)  # refused: pushed back for a retry
    schedule_wake("e-old", "wf", timezone.now() - timedelta(minutes=5))  # overdue
    assert relay_log.counts.maybe_report(force=True)
    with configure(WAKE_BACKEND=celery_backend), current(app):
        relay_log.log_startup("default")
    lines = [r.getMessage() for r in caplog.records]
    assert any(
        "unconfigured default app" in line and r.levelno == logging.ERROR
        for line, r in zip(lines, caplog.records, strict=True)
    )
    assert any("delivered=0 failed=1 overdue=1" in line for line in lines), lines
    started = [line for line in lines if "'proj'" in line]
    assert started and "database 'default'" in started[0] and "s3cret" not in started[0]


def test_the_celery_backend_only_enqueues() -> None:
    """It may publish during a commit (``PUBLISH_DURING_COMMIT``); a plain callable may not."""
    assert is_enqueue_only(celery_backend)
    assert not is_enqueue_only(lambda wakes: None)


@pytest.mark.parametrize("name", ["before_task_publish", "after_task_publish", "task_sent"])
def test_a_publish_signal_receiver_makes_the_celery_backend_publish_after_commits(
    name: str,
) -> None:
    """A receiver may use the database, whose connection is committing: not during it."""
    signal = getattr(signals, name)

    def receiver(**kwargs: object) -> None: ...

    signal.connect(receiver, sender="some.other_task")
    try:
        assert is_enqueue_only(celery_backend), "a receiver for another task only"
        signal.connect(receiver)
        assert not is_enqueue_only(celery_backend)
        assert is_enqueue_only(enqueues_only(lambda wakes: None)), "only the Celery backend"
    finally:
        signal.disconnect(receiver, sender="some.other_task")
        signal.disconnect(receiver)
    assert is_enqueue_only(celery_backend)
