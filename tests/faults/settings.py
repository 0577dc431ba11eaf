"""Settings of every process of the fault suite (workers, relay, driver, migrate).

``tests.settings`` on the suite's own throwaway PostgreSQL cluster, from the environment
the suite passes: ``YIELDSTAR_FAULTS_PG_PORT`` (the cluster, database
``yieldstar_faults``), ``YIELDSTAR_FAULTS_BROKER_URL``, ``YIELDSTAR_FAULTS_QUEUE``,
``YIELDSTAR_FAULTS_LEASE_SECONDS`` and ``YIELDSTAR_FAULTS_HISTORY`` (the folder each
process records its store operations in, see :mod:`tests.faults.history`); for
comparisons, ``YIELDSTAR_FAULTS_RUN_SLICE`` (seconds, or ``none``) and
``YIELDSTAR_FAULTS_PREFETCH`` (Celery's prefetch multiplier, 1 by default).
``YIELDSTAR_FAULTS_DATABASE_URL``, when set, names the database instead of the port: the
failover test's multi-host URL (``postgres://postgres@127.0.0.1:p1,127.0.0.1:p2/...
?target_session_attrs=read-write``), read by the demo's ``DATABASE_URL`` parser.
"""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "yieldstar_faults",
        "USER": "postgres",
        "HOST": "127.0.0.1",
        "PORT": os.environ.get("YIELDSTAR_FAULTS_PG_PORT", "5432"),
        # As docs/howto/run-workers.md recommends: keep connections, no health check
        # (resume_execution replaces a broken kept connection itself).
        "CONN_MAX_AGE": 60,
        "OPTIONS": {"connect_timeout": 2},
    }
}
if os.environ.get("YIELDSTAR_FAULTS_DATABASE_URL"):
    from demo_project.dburl import parse_database_url

    _entry = parse_database_url(os.environ["YIELDSTAR_FAULTS_DATABASE_URL"])
    DATABASES = {
        "default": {
            **_entry,
            "CONN_MAX_AGE": 60,
            "OPTIONS": {"connect_timeout": 2, **_entry.get("OPTIONS", {})},
        }
    }
CELERY_DB_REUSE_MAX = 1000
INSTALLED_APPS = [*INSTALLED_APPS, "tests.faults"]

CELERY_BROKER_URL = os.environ.get("YIELDSTAR_FAULTS_BROKER_URL", "redis://127.0.0.1:6379/2")
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("YIELDSTAR_FAULTS_QUEUE", "yieldstar-faults")
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# As docs/operations/reliability.md recommends (manage.py check: yieldstar.W006): no
# message reserved behind a busy pool process, queues with priorities on RabbitMQ.
CELERY_WORKER_PREFETCH_MULTIPLIER = int(os.environ.get("YIELDSTAR_FAULTS_PREFETCH", "1"))
CELERY_TASK_QUEUE_MAX_PRIORITY = 10
# Publishing fails fast while the broker is down; the relay delivers the wake later.
CELERY_BROKER_TRANSPORT_OPTIONS = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2}
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2}

YIELDSTAR = {
    "LEASE_SECONDS": float(os.environ.get("YIELDSTAR_FAULTS_LEASE_SECONDS", "4")),
    "RELAY_DELAY": 0.5,
    "RELAY_INTERVAL": 0.2,
    # YIELDSTAR_FAULTS_RUN_SLICE=none: resumes that hold their pool process until the run
    # ends (the comparison runs of docs/operations/reliability.md).
    "RUN_SLICE_SECONDS": (
        None
        if os.environ.get("YIELDSTAR_FAULTS_RUN_SLICE", "2") == "none"
        else float(os.environ.get("YIELDSTAR_FAULTS_RUN_SLICE", "2"))
    ),
}

from tests.e2e.celery_app import app as celery_app  # noqa: E402,F401  (the current app)
