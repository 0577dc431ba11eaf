"""The benchmark databases: created (or dropped and created afresh) from their URL."""

from __future__ import annotations

from typing import Any


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
