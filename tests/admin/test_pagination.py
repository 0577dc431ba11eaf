"""``EstimatedCountPaginator``: estimates for big unfiltered tables, capped counts else."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from yieldstar_django.admin import pagination
from yieldstar_django.admin.pagination import EstimatedCountPaginator, estimated_rows
from yieldstar_django.models import WakeIntent

pytestmark = pytest.mark.django_db


def make_intents(n: int) -> None:
    now = timezone.now()
    WakeIntent.objects.bulk_create(
        WakeIntent(
            execution_id=f"p-{i}",
            workflow_id="w",
            reason="timer",
            available_at=now,
            created_at=now,
        )
        for i in range(n)
    )


def test_small_tables_are_counted_exactly() -> None:
    make_intents(7)
    assert EstimatedCountPaginator(WakeIntent.objects.order_by("pk"), 5).count == 7


def test_big_unfiltered_tables_use_the_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    make_intents(3)
    monkeypatch.setattr(pagination, "estimated_rows", lambda queryset: 2_000_000)
    with CaptureQueriesContext(connection) as queries:
        paginator = EstimatedCountPaginator(WakeIntent.objects.order_by("-id"), 100)
        assert paginator.count == 2_000_000
        assert paginator.num_pages == 20_000
    assert queries.captured_queries == []


def test_filtered_lists_are_counted_up_to_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    make_intents(30)
    monkeypatch.setattr(pagination, "estimated_rows", lambda queryset: 2_000_000)
    monkeypatch.setattr(EstimatedCountPaginator, "count_cap", 10)
    filtered = WakeIntent.objects.filter(reason="timer").order_by("pk")
    with CaptureQueriesContext(connection) as queries:
        assert EstimatedCountPaginator(filtered, 5).count == 11
    (query,) = queries.captured_queries
    assert "LIMIT 11" in query["sql"].upper()


def test_lists_that_are_not_querysets() -> None:
    assert EstimatedCountPaginator(list(range(12)), 5).num_pages == 3


@pytest.mark.postgres
def test_estimated_rows_on_postgresql() -> None:
    make_intents(5)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE yieldstar_wakeintent")
    estimate = estimated_rows(WakeIntent.objects.all())
    assert estimate is None or estimate >= 0


@pytest.mark.sqlite
def test_no_estimate_elsewhere() -> None:
    assert estimated_rows(WakeIntent.objects.all()) is None


def test_unfiltered_detection() -> None:
    assert pagination.is_unfiltered(WakeIntent.objects.order_by("-id"))
    queryset: Any = WakeIntent.objects.filter(reason="x")
    assert not pagination.is_unfiltered(queryset)
