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

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"
VAR_DIR.mkdir(exist_ok=True)

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "demo-only-insecure-secret-key")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") != "0"
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "[::1]"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "yieldstar_django",
    "demo_project.demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "demo_project.urls"
WSGI_APPLICATION = "demo_project.wsgi.application"

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

DATABASES: dict[str, dict[str, Any]] = {
    "default": (
        parse_database_url(os.environ["DATABASE_URL"], base_dir=BASE_DIR)
        if os.environ.get("DATABASE_URL")
        else sqlite_database(VAR_DIR / "demo.sqlite3", timeout=20)
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.BasicAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
}
SPECTACULAR_SETTINGS = {"TITLE": "yieldstar demo", "VERSION": "0.1.0"}

# Celery reads every CELERY_* setting (see demo_project/celery.py).
if os.environ.get("CELERY_BROKER_URL"):
    CELERY_BROKER_URL = os.environ["CELERY_BROKER_URL"]
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
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

YIELDSTAR: dict[str, Any] = {}
