"""The runtime benchmark's Celery app, and its baseline tasks: ``bench.ping`` (its start time
as its result), ``bench.ping_noted`` (noted in a file, no result) and ``bench.ping_durable``
(its start noted by a PostgreSQL statement)."""

from __future__ import annotations

import os
import time

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.worker_settings")

#: The table of ``bench.ping_durable``: a producer's commit and the task's statement.
DURABLE_HOPS = "bench_durable_hop"

app = Celery("yieldstar_bench")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.set_default()


@app.task(name="bench.ping")
def ping() -> float:
    """Return when the task started (the enqueue-to-start baseline)."""
    return time.time()


@app.task(name="bench.ping_noted", ignore_result=True)
def ping_noted(path: str, number: int) -> None:
    """Append ``number`` and when the task started to ``path`` (the baseline sent as the
    wakes are, expecting no result)."""
    started = time.time()
    with open(path, "a") as notes:
        notes.write(f"{number} {started}\n")


@app.task(name="bench.ping_durable", ignore_result=True)
def ping_durable(row: int) -> None:
    """Note when the task's first statement starts in the producer's row (``now()``):
    the least a durable wake does, without any runtime (see ``bench.runtime``)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {DURABLE_HOPS} SET started_at = now() WHERE id = %s", [row])
