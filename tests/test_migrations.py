"""Every model change of the yieldstar app has its migration."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_no_missing_migrations() -> None:
    out = io.StringIO()
    try:
        call_command("makemigrations", "yieldstar", check=True, dry_run=True, stdout=out)
    except SystemExit:  # pragma: no cover - only on failure
        pytest.fail(f"yieldstar has model changes without a migration:\n{out.getvalue()}")
