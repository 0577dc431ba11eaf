"""The runtime benchmark's Celery app, and ``bench.ping``, the baseline task."""

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
