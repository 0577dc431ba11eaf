"""A second connection to a test database, outside Django: psycopg with the server's
defaults, as another process (a worker, a second client) would open one."""

from __future__ import annotations

from typing import Any

import psycopg
from django.db import connections


def second_connection(
    alias: str = "default", *, autocommit: bool = True
) -> psycopg.Connection[Any]:
    """A new connection to the database of ``alias`` (its test database during tests)."""
    s = connections[alias].settings_dict
    return psycopg.connect(
        dbname=s["NAME"],
        user=s["USER"] or None,
        password=s["PASSWORD"] or None,
        host=s["HOST"] or None,
        port=s["PORT"] or None,
        autocommit=autocommit,
    )
