"""The runtime benchmark's Celery app, and its baseline tasks: ``bench.ping`` (its start time
as its result) and ``bench.ping_noted`` (noted in a file, no result)."""

from __future__ import annotations

import os
import time

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.worker_settings")

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
