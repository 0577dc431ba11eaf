"""reports/schedules.py: an installed app's ``schedules`` module, imported at startup in
every process (web, workers, relay), like its ``workflows`` module."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from yieldstar_django import define_schedule, workflow


def count_rows(kind: str) -> int:
    return {"sales": 42}.get(kind, 0)


@workflow("reports.send")
def send_report(step: Any, kind: str) -> Any:
    rows = yield from step.run(count_rows, kind)
    return {"kind": kind, "rows": rows}


@workflow("reports.refresh-cache")
def refresh_cache(step: Any) -> Any:
    yield from step.run(count_rows, "cache")


# Every day at 03:00 in Paris, whatever the season.
define_schedule(
    "nightly-report",
    send_report,
    cron="0 3 * * *",
    timezone="Europe/Paris",
    args=("sales",),
)

# Every five minutes; ticks missed while no relay ran are not caught up.
define_schedule("refresh-cache", refresh_cache, every=timedelta(minutes=5), catch_up="skip")
