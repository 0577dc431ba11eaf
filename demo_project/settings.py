"""Settings of the demo project: SQLite and a file-system Celery broker by default.

Environment:

- ``DATABASE_URL``: a ``postgres://`` or ``sqlite://`` URL (see ``demo_project.dburl``);
  default ``var/demo.sqlite3``.
- ``CELERY_BROKER_URL``: a Celery broker URL; default kombu's ``filesystem://``
  transport with its folders under ``var/broker``, so the demo needs no service.
- ``DJANGO_DEBUG``: ``0`` turns debug off; ``DJANGO_SECRET_KEY`` replaces the demo key.

Everything the demo writes lives in ``var/`` (git-ignored).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from demo_project.dburl import parse_database_url, sqlite_database
from demo_project.shared_settings import *  # noqa: F403
from demo_project.shared_settings import INSTALLED_APPS, MIDDLEWARE

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"
VAR_DIR.mkdir(exist_ok=True)

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "demo-only-insecure-secret-key")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") != "0"
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "[::1]"]

INSTALLED_APPS = [*INSTALLED_APPS, "demo_project.demo"]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    *MIDDLEWARE,
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "demo_project.urls"
WSGI_APPLICATION = "demo_project.wsgi.application"

DATABASES: dict[str, dict[str, Any]] = {
    "default": (
        parse_database_url(os.environ["DATABASE_URL"], base_dir=BASE_DIR)
        if os.environ.get("DATABASE_URL")
        else sqlite_database(VAR_DIR / "demo.sqlite3", timeout=20)
    )
}

SPECTACULAR_SETTINGS = {"TITLE": "yieldstar demo", "VERSION": "0.1.0"}

# Celery reads every CELERY_* setting (see demo_project/celery.py); the shared ones are in
# demo_project/shared_settings.py.
if os.environ.get("CELERY_BROKER_URL"):
    CELERY_BROKER_URL = os.environ["CELERY_BROKER_URL"]
    # A broker that stops answering costs a write seconds, not for ever (yieldstar.W005).
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, Any] = {
        "socket_timeout": 2,
        "socket_connect_timeout": 2,
    }
else:
    BROKER_DIR = VAR_DIR / "broker"
    _queue_dir = BROKER_DIR / "queue"
    for _folder in (_queue_dir, BROKER_DIR / "processed", BROKER_DIR / "control"):
        _folder.mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_URL = "filesystem://"
    # One folder for both directions: this process and the worker share the queue.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_queue_dir),
        "data_folder_out": str(_queue_dir),
        "processed_folder": str(BROKER_DIR / "processed"),
        "control_folder": str(BROKER_DIR / "control"),
    }
