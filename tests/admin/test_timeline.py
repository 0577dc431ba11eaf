"""The execution page's timeline: runs and steps on one time axis with millisecond times
and durations, each run's worker, a run that never let its lease go and the takeover after
it, the step that ran twice, the stores a wait names, sleeps and retries, and a failure's
traceback in full."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.admin.utils import quote
from django.test import Client
from django.urls import reverse

from yieldstar_django.admin.timeline import build_timeline, duration, stamp
from yieldstar_django.core.definition import StoreDefinition
from yieldstar_django.core.results import StoreWaiter
from yieldstar_django.core.store import StoreClient
from yieldstar_django.models import Execution, ExecutionRun, ExecutionStep

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 9, 30, 0, 125000, tzinfo=UTC)
TRACEBACK = (
    "Traceback (most recent call last):\n"
    + "".join(
        f'  File "/srv/app/shop/payments/{"deep/" * 12}module_{n}.py", line {n}, in charge\n'
        f"    {'x' * 150}\n"
        for n in range(40)
    )
    + "shop.payments.CardDeclined: the card was declined"
)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def crashed_execution(execution_id: str = "checkout-7") -> Execution:
    """A failed execution: run 1 suspended for a retry, run 2 (another worker) died in
    the retried step, run 3 took over, ran it again and failed it."""
    execution = Execution.objects.create(
        id=execution_id,
        workflow_id="shop.checkout",
        status="failed",
        input_json="{}",
        runs=3,
        created_at=T0,
        finished_at=at(41.5),
        error_json=json.dumps(
            {"type": "CardDeclined", "message": "the card was declined", "traceback": TRACEBACK}
        ),
    )
    ExecutionRun.objects.bulk_create(
        [
            ExecutionRun(
                execution=execution,
                number=1,
                lease_owner="a" * 32,
                worker="web-1:4101",
                started_at=at(0.010),
                ended_at=at(0.052),
                outcome="retrying",
            ),
            ExecutionRun(
                execution=execution,
                number=2,
                lease_owner="b" * 32,
                worker="worker-2:5202",
                started_at=at(10.020),
            ),
            ExecutionRun(
                execution=execution,
                number=3,
                lease_owner="c" * 32,
                worker="worker-3:6303",
                started_at=at(40.260),
                ended_at=at(41.5),
                outcome="failed",
            ),
        ]
    )
    ExecutionStep.objects.bulk_create(
        [
            ExecutionStep(
                execution=execution,
                step_key="0",
                position=0,
                kind="get",
                fingerprint="inventory/warehouse-1",
                status="completed",
                value_json="{}",
                attempts=1,
                created_at=at(0.012),
                recorded_at=at(0.0154),
            ),
            ExecutionStep(
                execution=execution,
                step_key="charge",
                position=1,
                kind="run",
                fingerprint="shop.payments.charge",
                status="failed",
                error_json=json.dumps(
                    {"type": "CardDeclined", "message": "declined", "traceback": TRACEBACK}
                ),
                attempts=2,
                created_at=at(0.016),
                recorded_at=at(41.49),
            ),
        ]
    )
    return execution


def page(client: Client, execution_id: str) -> str:
    url = reverse("admin:yieldstar_execution_change", args=[quote(execution_id)])
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


def test_times_to_the_millisecond_and_durations() -> None:
    assert stamp(T0) == "2026-03-02 09:30:00.125"
    assert stamp(None) == "—"
    assert duration(0.0034) == "3.4 ms"
    assert duration(0.25) == "250 ms"
    assert duration(3.2014) == "3.201 s"
    assert duration(242) == "4 min 2 s"
    assert duration(3 * 86400 + 4 * 3600) == "3 d 4 h"


def test_a_run_that_never_ended_is_taken_over_and_its_step_ran_twice() -> None:
    execution = crashed_execution()
    runs = list(ExecutionRun.objects.filter(execution=execution).order_by("number"))
    steps = list(ExecutionStep.objects.filter(execution=execution).order_by("position"))
    timeline = build_timeline(execution, runs, steps, [])
    assert timeline.takeovers == 1
    assert timeline.ran_again == 1
    run2 = timeline.runs[1]
    assert "yieldstar-tl-lost" in run2.css
    assert run2.end == at(40.260)  # drawn up to the takeover
    assert any("run 3 took over at 2026-03-02 09:30:40.385" in note for note in run2.notes)
    charge = timeline.steps[1]
    assert "yieldstar-tl-twice" in charge.css
    assert any("ran twice: run 2 (worker-2:5202)" in note for note in charge.notes)
    assert any(note == "2 attempts" for note in charge.notes)
    assert "yieldstar-tl-twice" not in timeline.steps[0].css
    # Every bar sits on the axis, from the execution's creation to its end.
    for bar in [*timeline.runs, *timeline.steps]:
        assert 0 <= bar.left <= 100 and bar.width >= 0 and bar.left + bar.width <= 100.001
    assert timeline.origin == T0 and timeline.until == at(41.5)


def test_a_run_ended_normally_is_no_takeover() -> None:
    execution = crashed_execution()
    ExecutionRun.objects.filter(execution=execution, number=2).update(
        ended_at=at(10.5), outcome="retrying"
    )
    runs = list(ExecutionRun.objects.filter(execution=execution).order_by("number"))
    steps = list(ExecutionStep.objects.filter(execution=execution).order_by("position"))
    timeline = build_timeline(execution, runs, steps, [])
    assert (timeline.takeovers, timeline.ran_again) == (0, 0)


def test_the_page_shows_the_timeline(admin_client: Client) -> None:
    crashed_execution()
    html = page(admin_client, "checkout-7")
    assert 'id="timeline"' in html
    for text in [
        "worker-2:5202",
        "web-1:4101",
        "1 taken over after a run never let its lease go",
        "1 step ran twice",
        "run 3 took over at 2026-03-02 09:30:40.385",
        "2026-03-02 09:30:00.137",  # step 0 began, to the millisecond
        "3.4 ms",  # and took
        "41.474 s",  # the charge step, from its first attempt to its failure
        "inventory/warehouse-1",
        "shop.payments.charge",
        "2 attempts",
    ]:
        assert text in html, text
    # The traceback is shown whole, pre-formatted and wrapped, not as one JSON string.
    assert '<pre class="yieldstar-traceback">' in html
    assert "module_39.py" in html and "CardDeclined: the card was declined" in html
    assert "\\n" not in html.split('id="timeline"')[0].split("yieldstar-traceback")[1][:2000]


def test_waiting_names_the_stores_and_a_sleep_its_end(
    admin_client: Client, counters: StoreDefinition, store_client: StoreClient
) -> None:
    execution = Execution.objects.create(
        id="waiter-1",
        workflow_id="shop.fulfil",
        status="waiting",
        input_json="{}",
        waiting_on="pick",
        runs=1,
        created_at=T0,
    )
    ExecutionRun.objects.create(
        execution=execution,
        number=1,
        lease_owner="d" * 32,
        worker="worker-9:99",
        started_at=at(0.001),
        ended_at=at(0.030),
        outcome="waiting",
    )
    ExecutionStep.objects.bulk_create(
        [
            ExecutionStep(
                execution=execution,
                step_key="nap",
                position=0,
                kind="sleep",
                status="completed",
                wake_at=at(0.003),
                created_at=at(0.002),
                recorded_at=at(0.003),
            ),
            ExecutionStep(
                execution=execution,
                step_key="pick",
                position=1,
                kind="take",
                fingerprint=f"{counters.name}/shelf-4",
                status="pending",
                created_at=at(0.010),
            ),
        ]
    )
    snapshot = store_client.get_store(counters, "shelf-4")
    store_client.register_waiter(
        StoreWaiter(
            "shop.fulfil",
            "waiter-1",
            "pick",
            counters.name,
            "shelf-4",
            snapshot.instance_id,
            snapshot.version,
            (),
        )
    )
    html = page(admin_client, "waiter-1")
    assert f"<code>{counters.name}/shelf-4</code> (step <code>pick</code>)" in html
    assert f"waits on {counters.name}/shelf-4" in html
    assert "sleeps until 2026-03-02 09:30:00.128" in html
    assert "worker-9:99" in html and "let the lease go: waiting" in html


def test_an_execution_without_runs_recorded_still_shows(admin_client: Client) -> None:
    Execution.objects.create(id="old-1", workflow_id="w", status="pending", input_json="{}")
    html = page(admin_client, "old-1")
    assert "No run was recorded" in html


def test_the_page_reads_the_same_queries_however_many_runs(admin_client: Client) -> None:
    from .conftest import count_queries

    execution = crashed_execution("many-runs")
    url = reverse("admin:yieldstar_execution_change", args=["many-runs"])
    count_queries(admin_client, url)  # warms caches
    few, _ = count_queries(admin_client, url)
    ExecutionRun.objects.bulk_create(
        ExecutionRun(
            execution=execution,
            number=n,
            lease_owner=f"{n:032d}",
            worker="w:1",
            started_at=at(n),
            ended_at=at(n + 0.5),
            outcome="retrying",
        )
        for n in range(4, 300)
    )
    Execution.objects.filter(pk="many-runs").update(runs=299)
    many, html = count_queries(admin_client, url)
    assert many == few
    assert "are not drawn" in html
