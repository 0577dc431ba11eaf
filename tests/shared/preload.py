"""Imported once by the forkserver of the integration tests, so that worker processes
start with Django set up and the connector imported (a fork, not a fresh interpreter).

Settings are loaded here but no database connection is opened; each worker points the
aliases at the test databases before its first query (``workers.setup_django``).
"""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django

django.setup()

import yieldstar_django.connector  # noqa: E402
import yieldstar_django.wakes  # noqa: E402, F401
