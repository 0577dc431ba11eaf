"""Settings for the test suite (``DJANGO_SETTINGS_MODULE=tests.settings``).

Environment:

- ``DATABASE_URL``: ``postgres://...`` or ``sqlite:///path`` (see ``demo_project.dburl``).
  Default ``postgres://postgres@127.0.0.1:5432/yieldstar``; the test runner creates and
  drops ``test_yieldstar``. A SQLite URL tests against a file next to the named one
  (``test_<name>``), not an in-memory database, so that several connections can share it.
- ``CELERY_BROKER_URL``: default ``redis://127.0.0.1:6379/15``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from demo_project.dburl import parse_database_url, sqlite_database

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = "tests-only-insecure-secret-key"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",  # the admin's CSS and JS for live_server (browser tests)
    "rest_framework",
    "drf_spectacular",
    "yieldstar_django",
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "tests.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


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

# A second, file-based SQLite database, so one run covers both backends: the conformance
# suite and the integration tests use it through ``databases=["sqlite"]``.
_SQLITE_PATH = Path(os.environ.get("YIELDSTAR_TEST_SQLITE", BASE_DIR / "var" / "tests.sqlite3"))
_SQLITE_PATH.parent.mkdir(parents=True, exist_ok=True)
DATABASES["sqlite"] = {
    **sqlite_database(_SQLITE_PATH, timeout=20.0),
    "TEST": {"NAME": str(_SQLITE_PATH.with_name(f"test_{_SQLITE_PATH.name}"))},
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

USE_TZ = True
TIME_ZONE = "UTC"
LANGUAGE_CODE = "en-us"
STATIC_URL = "static/"

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.BasicAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
}

CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/15")
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

YIELDSTAR: dict[str, Any] = {}
