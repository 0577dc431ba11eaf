"""The benchmark databases: created (or dropped and created afresh) from their URL."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def _server(url: str) -> tuple[str, dict[str, Any]]:
    """The database name of ``url`` and the parameters to reach its server."""
    from demo_project.dburl import parse_database_url

    entry = parse_database_url(url)
    params = {
        "user": entry["USER"] or None,
        "password": entry["PASSWORD"] or None,
        "host": entry["HOST"] or None,
        "port": entry["PORT"] or None,
    }
    return str(entry["NAME"]), params


def create_database(url: str, *, afresh: bool = False) -> None:
    """Create the database of ``url`` if it does not exist; with ``afresh``, drop it first."""
    import psycopg
    from psycopg import sql

    name, params = _server(url)
    identifier = sql.Identifier(name)
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as conn:
        if afresh:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(identifier))
        elif conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            return
        conn.execute(sql.SQL("CREATE DATABASE {}").format(identifier))


def configure_dbos(name: str) -> Any:
    """``DBOS`` configured as app ``name`` (not launched) on its own system database of the
    same PostgreSQL server as ``BENCH_DATABASE_URL`` (``<that database>_dbos``, created if
    missing), in this process; returns the ``DBOS`` class."""
    from dbos import DBOS, DBOSConfig

    from demo_project.dburl import parse_database_url

    url = os.environ["BENCH_DATABASE_URL"] + "_dbos"
    create_database(url)
    entry = parse_database_url(url)
    credentials = entry["USER"] + (f":{entry['PASSWORD']}" if entry["PASSWORD"] else "")
    config: DBOSConfig = {
        "name": name,
        "system_database_url": (
            f"postgresql://{credentials}@{entry['HOST']}:{entry['PORT'] or 5432}/{entry['NAME']}"
        ),
        "log_level": "WARNING",
    }
    DBOS(config=config)
    return DBOS


def start_dbos(make: Callable[[], T]) -> tuple[T | None, str]:
    """``make()`` (a DBOS baseline), or ``None`` and why not: the bench extra is missing,
    or DBOS cannot start here."""
    try:
        return make(), ""
    except Exception as exc:
        return None, f"DBOS unavailable: {type(exc).__name__}: {exc}"[:200]
