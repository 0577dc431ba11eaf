"""The schema view works in a project whose ``REST_FRAMEWORK`` sets no
``DEFAULT_SCHEMA_CLASS`` (as the README configures it): the API's views carry
drf-spectacular's schema class themselves. Run in a fresh interpreter, since the schema
classes are chosen when the views' modules are imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.paths import ROOT


def test_schema_without_default_schema_class() -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings_plain_rest"}
    completed = subprocess.run(
        [sys.executable, "-m", "tests.api.schema_probe"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert result["default_schema_class"] == "rest_framework.schemas.openapi"  # DRF's own
    assert result["status"] == 200, result["body"]
    assert {
        "/yieldstar/",
        "/yieldstar/executions/",
        "/yieldstar/stores/{name}/{id}/",
    } <= set(result["paths"])
