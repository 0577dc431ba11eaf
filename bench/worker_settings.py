"""Settings of the runtime benchmark's Celery worker (and of the benchmark process).

``tests.settings`` on ``BENCH_DATABASE_URL``, with what a production worker should have
(docs/howto/run-workers.md): persistent connections (``CONN_MAX_AGE``) and
``CELERY_DB_REUSE_MAX``, without which Celery's Django fixup closes every connection around
every task, and prepared hot statements (``prepare_threshold``: a direct connection, no
transaction-pooling PgBouncer between); the URLs of ``bench.urls``.
"""

from __future__ import annotations

import os

os.environ["DATABASE_URL"] = os.environ.get(
    "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/yieldstar_bench_runtime"
)

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES, INSTALLED_APPS

DATABASES["default"]["CONN_MAX_AGE"] = 600
if DATABASES["default"]["ENGINE"].endswith("postgresql"):
    DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = 5
INSTALLED_APPS = [*INSTALLED_APPS, "bench"]
#: The test suite's URLs and the bounds suite's floor view (``bench.floor``).
ROOT_URLCONF = "bench.urls"

CELERY_BROKER_URL = os.environ.get("BENCH_BROKER_URL", "redis://127.0.0.1:6379/13")
CELERY_RESULT_BACKEND = CELERY_BROKER_URL
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("BENCH_QUEUE", "yieldstar-bench")
CELERY_DB_REUSE_MAX = 100_000
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

from .celery_app import app as celery_app  # noqa: E402,F401
