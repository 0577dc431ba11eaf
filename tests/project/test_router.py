"""Runs ``tests/project/router`` (yieldstar on a second, routed database) under its own settings
module, in a subprocess: pytest-django configures one settings module per run."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.db import connection

from tests.paths import ROOT


@pytest.mark.slow
def test_two_databases_with_a_router() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the routed database is a second PostgreSQL database; DATABASE_URL is SQLite")
    done = subprocess.run(
        [
            sys.executable, "-m", "pytest", "tests/project/router", "-q", "-p", "no:cacheprovider",
            "-n", "0", "--ds=tests.settings_router", "--create-db",

        ],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings_router"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "6 passed" in done.stdout.splitlines()[-1], done.stdout[-2000:]
