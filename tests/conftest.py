"""Shared pytest configuration.

Tests marked ``postgres`` run only when ``DATABASE_URL`` points at PostgreSQL, tests
marked ``sqlite`` only when it points at SQLite; the others are skipped with a reason.
"""

from __future__ import annotations

import pytest
from django.conf import settings


def database_vendor() -> str:
    """``"postgresql"`` or ``"sqlite"``: the vendor of the ``default`` database."""
    engine = str(settings.DATABASES["default"]["ENGINE"])
    return "sqlite" if "sqlite" in engine else "postgresql"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    vendor = database_vendor()
    for item in items:
        for marker, needs in (("postgres", "postgresql"), ("sqlite", "sqlite")):
            if item.get_closest_marker(marker) and vendor != needs:
                item.add_marker(
                    pytest.mark.skip(reason=f"needs {needs}; DATABASE_URL points at {vendor}")
                )
