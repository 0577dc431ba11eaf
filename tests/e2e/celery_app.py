"""The Celery app of the end-to-end worker: ``celery -A tests.e2e.celery_app worker``.

Configured from ``tests.e2e.worker_settings`` (``CELERY_*``), which reads the broker, the
queue and the test database from the environment the test suite passes.
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.e2e.worker_settings")

app = Celery("yieldstar_e2e")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.set_default()
