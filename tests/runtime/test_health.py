"""``yieldstar_health`` and :mod:`yieldstar_django.health`: each unhealthy state built for
real (an execution started and run, then the part that keeps it alive taken away), seen
healthy first, then reported, by the function and by the command's exit status and JSON.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from tests.testing.workflows import consumer, flaky_hour
from yieldstar_django import clock, get_execution, start_workflow
from yieldstar_django.health import CHECKS, check_health, require_checks
from yieldstar_django.models import ChildWait, Execution, RelayHeartbeat, Waiter, WakeIntent
from yieldstar_django.runtime import workflow
from yieldstar_django.runtime.leases import acquire_lease
from yieldstar_django.testing import advance_time, run_until_idle
from yieldstar_django.testing.cases import inline_settings
from yieldstar_django.wakes import relay_log, relay_once


@pytest.fixture(autouse=True)
def _inline() -> Iterator[None]:
    with inline_settings():
        try:
            yield
        finally:
            clock.reset()


@pytest.fixture
def relay_seen(db: None) -> None:
    """A relay round ran now (its heartbeat written, whatever this process wrote before)."""
    relay_log.heartbeat.beat("default", force=True)


def _failing(**kwargs: Any) -> dict[str, Any]:
    report = check_health(**kwargs)
    return {f.check: f for f in report.findings if not f.ok}


def _command(*args: str) -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("yieldstar_health", *args, stdout=out, stderr=StringIO())
    except SystemExit as exit:
        return int(exit.code or 0), out.getvalue()
    return 0, out.getvalue()


def test_a_running_execution_whose_lease_expired_with_no_takeover_left(relay_seen: None) -> None:
    execution_id = start_workflow(consumer, "box-lease")
    lease = acquire_lease(execution_id)
    assert lease is not None and get_execution(execution_id).status == "running"
    assert _failing() == {}
    # Its worker died: the lease expired two minutes ago, but the takeover timer is there.
    Execution.objects.filter(pk=execution_id).update(
        lease_expires_at=timezone.now() - timedelta(minutes=2)
    )
    assert _failing() == {}
    # The takeover timer is gone too: nothing will ever run it again.
    WakeIntent.objects.filter(execution_id=execution_id).delete()
    failing = _failing()
    assert set(failing) == {"expired_leases"}
    assert failing["expired_leases"].examples == [execution_id]
    assert failing["expired_leases"].count == 1
    # Within the grace, a lease expired a moment ago is not reported.
    Execution.objects.filter(pk=execution_id).update(lease_expires_at=timezone.now())
    assert _failing() == {}


def test_a_waiting_execution_with_no_waiter(relay_seen: None) -> None:
    execution_id = start_workflow(consumer, "box-empty")
    run_until_idle()
    assert get_execution(execution_id).status == "waiting"
    assert Waiter.objects.filter(execution_id=execution_id).exists()
    assert _failing() == {}
    Waiter.objects.filter(execution_id=execution_id).delete()
    failing = _failing()
    assert set(failing) == {"stranded"}
    assert failing["stranded"].examples == [execution_id]


@workflow("health.parent")
def parent_of_a_consumer(step: Any, box: str) -> Any:
    child = yield from step.start(consumer, box)
    return (yield from step.wait(child))


def test_a_parent_waiting_for_its_child_is_healthy(relay_seen: None) -> None:
    """A parent waits on its child's end (``ChildWait``), with no waiter and no timer:
    that is not stranded; with its wait gone, it is."""
    execution_id = start_workflow(parent_of_a_consumer, "box-child")
    run_until_idle()
    assert get_execution(execution_id).status == "waiting"
    assert not Waiter.objects.filter(execution_id=execution_id).exists()
    assert ChildWait.objects.filter(execution_id=execution_id).exists()
    assert _failing() == {}
    ChildWait.objects.filter(execution_id=execution_id).delete()
    failing = _failing()
    assert set(failing) == {"stranded"}
    assert failing["stranded"].examples == [execution_id]


def test_a_sleeping_execution_keeps_its_timer_and_is_healthy(relay_seen: None) -> None:
    """Waiting on a timer, not a waiter, is healthy until the timer is lost."""
    execution_id = start_workflow(flaky_hour)
    run_until_idle()
    assert get_execution(execution_id).status == "retrying"
    assert _failing() == {}
    WakeIntent.objects.filter(execution_id=execution_id).delete()
    assert set(_failing()) == {"stranded"}


def test_an_overdue_timer(relay_seen: None) -> None:
    execution_id = start_workflow(flaky_hour)
    run_until_idle()
    advance_time(3600 + 30)  # due half a minute ago: within HEALTH_OVERDUE_SECONDS
    relay_log.heartbeat.beat("default", force=True)
    assert _failing() == {}
    advance_time(60)
    failing = _failing()
    assert set(failing) == {"overdue_timers"}
    assert failing["overdue_timers"].examples == [execution_id]
    # Running it acknowledges the timer: healthy again.
    run_until_idle()
    assert _failing() == {}


def test_an_overdue_wake_intent(relay_seen: None, settings: Any) -> None:
    """A start whose wake nobody delivered (no relay, a broker down)."""
    execution_id = start_workflow(consumer, "box-late")  # held back by the test transaction
    assert WakeIntent.objects.filter(execution_id=execution_id, delivered_at=None).exists()
    assert _failing() == {}
    advance_time(61)
    failing = _failing()
    assert set(failing) == {"overdue_wakes"}
    assert failing["overdue_wakes"].examples == [execution_id]
    settings.YIELDSTAR = {**settings.YIELDSTAR, "HEALTH_OVERDUE_SECONDS": 120}
    assert _failing() == {}


def test_no_relay_seen(db: None) -> None:
    failing = _failing()
    assert set(failing) == {"relay"}
    assert "no relay has recorded a heartbeat" in failing["relay"].message
    relay_log.heartbeat._last = None  # as in a new relay process
    relay_once()
    assert RelayHeartbeat.objects.count() == 1
    assert _failing() == {}
    RelayHeartbeat.objects.update(seen_at=timezone.now() - timedelta(seconds=61))
    failing = _failing()
    assert set(failing) == {"relay"} and "no relay seen for" in failing["relay"].message


def test_the_heartbeat_is_written_at_most_every_ten_seconds(db: None) -> None:
    relay_log.heartbeat._last = None
    assert relay_log.heartbeat.beat("default") is True
    assert relay_log.heartbeat.beat("default") is False
    assert relay_log.heartbeat.beat("default", force=True) is True
    assert RelayHeartbeat.objects.count() == 1


def test_the_command_exit_status_and_json(relay_seen: None) -> None:
    status, out = _command()
    assert status == 0 and out.strip().endswith("healthy")
    execution_id = start_workflow(consumer, "box-cmd")
    run_until_idle()
    Waiter.objects.filter(execution_id=execution_id).delete()
    status, out = _command()
    assert status == 1 and "FAIL stranded" in out and execution_id in out
    status, out = _command("--json")
    report = json.loads(out)
    assert status == 1 and report["healthy"] is False
    assert set(report["checks"]) == set(CHECKS)
    assert report["checks"]["stranded"]["examples"] == [execution_id]
    assert report["checks"]["relay"]["ok"] is True
    # A probe of the relay's liveness ignores stranded executions.
    assert _command("--probe", "liveness")[0] == 0
    assert _command("--only", "relay", "--only", "overdue_wakes")[0] == 0
    assert _command("--only", "stranded")[0] == 1


def test_readiness_needs_only_the_database(db: None) -> None:
    status, out = _command("--probe", "readiness", "--json")
    assert status == 0 and json.loads(out)["checks"] == {}
    assert _command()[0] == 1  # no relay seen
    assert _command("--probe", "liveness")[0] == 1


def test_a_database_that_cannot_be_checked_exits_2(
    db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.db import OperationalError

    from yieldstar_django.management.commands import yieldstar_health

    def unreachable(*args: Any, **kwargs: Any) -> None:
        raise OperationalError("connection refused")

    monkeypatch.setattr(yieldstar_health, "check_health", unreachable)
    status, out = _command("--json")
    assert status == 2
    assert json.loads(out) == {
        "healthy": False,
        "database": "default",
        "error": "connection refused",
    }


def test_bad_arguments_are_refused(db: None) -> None:
    with pytest.raises(ValueError, match="unknown health check"):
        require_checks(["relay", "nope"])
    with pytest.raises(CommandError, match="invalid choice"):
        call_command("yieldstar_health", "--only", "nope")
    with pytest.raises(CommandError, match="not both"):
        call_command("yieldstar_health", "--only", "relay", "--probe", "liveness")
    with pytest.raises(CommandError, match="names no database"):
        call_command("yieldstar_health", "--database", "nowhere")
