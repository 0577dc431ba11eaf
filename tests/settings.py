"""Settings for the test suite (``DJANGO_SETTINGS_MODULE=tests.settings``).

Environment:

- ``DATABASE_URL``: ``postgres://...`` or ``sqlite:///path`` (see ``demo_project.dburl``).
  Default ``postgres://postgres@127.0.0.1:5432/yieldstar``; the test runner creates and
  drops ``test_yieldstar``. A SQLite URL tests against a file next to the named one
  (``test_<name>``), not an in-memory database, so that several connections can share it.
- ``CELERY_BROKER_URL``: default ``redis://127.0.0.1:6379/15``.
- ``YIELDSTAR_TEST_POOLER``: ``transaction`` when ``DATABASE_URL`` reaches PostgreSQL
  through a transaction pooler (``scripts/test.sh`` runs suites through PgBouncer so): the
  settings such a database needs (``docs/operations/database.md#connection-poolers``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from demo_project.dburl import parse_database_url, sqlite_database
from demo_project.shared_settings import *  # noqa: F403
from demo_project.shared_settings import INSTALLED_APPS

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = "tests-only-insecure-secret-key"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]

ROOT_URLCONF = "tests.urls"

# The suite's own models (``tests/shared/models.py``): a project's tables that workflows
# write with ``step.atomic``.
INSTALLED_APPS = [*INSTALLED_APPS, "tests.shared"]


def _database() -> dict[str, Any]:
    url = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/yieldstar"
    entry = parse_database_url(url, base_dir=BASE_DIR)
    if entry["ENGINE"].endswith("sqlite3") and entry["NAME"] != ":memory:":
        path = Path(entry["NAME"])
        path.parent.mkdir(parents=True, exist_ok=True)
        entry["TEST"] = {"NAME": str(path.with_name(f"test_{path.name}"))}
        entry["OPTIONS"].setdefault("timeout", 20.0)
    return entry


DATABASES: dict[str, dict[str, Any]] = {"default": _database()}

#: ``"transaction"`` when the suite runs through a transaction pooler, else ``None``.
POOLER = os.environ.get("YIELDSTAR_TEST_POOLER") or None
if POOLER == "transaction":
    # What docs/operations/database.md says a database behind a transaction pooler
    # needs: no WITH HOLD cursors, no prepared statements (Django's default, said here).
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
    DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = None

# A second, file-based SQLite database, so one run covers both backends: the conformance
# suite and the integration tests use it through ``databases=["sqlite"]``.
_SQLITE_PATH = Path(os.environ.get("YIELDSTAR_TEST_SQLITE", BASE_DIR / "var" / "tests.sqlite3"))
_SQLITE_PATH.parent.mkdir(parents=True, exist_ok=True)
DATABASES["sqlite"] = {
    **sqlite_database(_SQLITE_PATH, timeout=20.0),
    "TEST": {
        "NAME": str(_SQLITE_PATH.with_name(f"test_{_SQLITE_PATH.name}")),
        # Its own file, created whether or not ``default`` is: a run of SQLite tests only
        # (``-k sqlite``) would otherwise stop at "Circular dependency in TEST[DEPENDENCIES]".
        "DEPENDENCIES": [],
    },
}

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/15")

YIELDSTAR: dict[str, Any] = {"POOLER": POOLER} if POOLER else {}
