"""Settings of the processes an end-to-end test starts (Celery worker, relay, pusher).

``tests.settings`` plus, from the environment the test passes: the test database that
pytest-django created (``YIELDSTAR_E2E_DB_NAME``), the broker (``YIELDSTAR_E2E_BROKER_URL``)
and a queue of its own (``YIELDSTAR_E2E_QUEUE``), so nothing else consumes its tasks.
"""

from __future__ import annotations

import json
import os

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES, INSTALLED_APPS, YIELDSTAR

from .timing import E2E_YIELDSTAR

DATABASES["default"]["NAME"] = os.environ["YIELDSTAR_E2E_DB_NAME"]
# As docs/howto/run-workers.md recommends: keep connections across tasks, no health
# check (close_old_connections() around each resume drops expired ones, and a resume
# replaces a kept connection it finds broken).
DATABASES["default"]["CONN_MAX_AGE"] = 60
# Celery's Django fixup closes every connection around every task unless this is set.
CELERY_DB_REUSE_MAX = 1000
INSTALLED_APPS = [*INSTALLED_APPS, "tests.e2e"]

CELERY_BROKER_URL = os.environ["YIELDSTAR_E2E_BROKER_URL"]
CELERY_TASK_DEFAULT_QUEUE = os.environ["YIELDSTAR_E2E_QUEUE"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A test's own broker transport options (JSON), e.g. a short Redis visibility timeout.
CELERY_BROKER_TRANSPORT_OPTIONS = json.loads(
    os.environ.get("YIELDSTAR_E2E_TRANSPORT_OPTIONS", "{}")
)

YIELDSTAR = {**YIELDSTAR, **E2E_YIELDSTAR}  # POOLER kept (tests.settings)

from .celery_app import app as celery_app  # noqa: E402,F401  (the current Celery app)

# The traces test's workers export their spans to a file (tests/e2e/spans.py).
if os.environ.get("YIELDSTAR_E2E_SPANS"):
    from .spans import install

    install(os.environ["YIELDSTAR_E2E_SPANS"])
