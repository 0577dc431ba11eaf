"""The demo project's Celery app, configured from Django settings named ``CELERY_*``.

Run a worker with ``celery -A demo_project worker``.
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo_project.settings")

app = Celery("demo_project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
