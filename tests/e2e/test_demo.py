"""The README's demo, run end to end as CI would: ``python -m demo_project.run_demo
--exit-when-done`` (a real Celery worker on kombu's file-system broker, the relay, the
development server, SQLite in a temporary folder)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.celery]


def test_demo_runs_end_to_end(tmp_path: Path) -> None:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE"}
    }
    env.update(CI="1", DATABASE_URL=f"sqlite:///{tmp_path / 'demo.sqlite3'}")
    completed = subprocess.run(
        [sys.executable, "-m", "demo_project.run_demo", "--exit-when-done", "--port", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output
    assert "every order picked exactly once: yes" in output
    assert "done: every order ended as expected" in output
    assert "admin login: admin / " in output
