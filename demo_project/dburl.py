"""Parse a ``DATABASE_URL`` into a Django ``DATABASES`` entry (no third-party dependency).

Understood forms:

- ``postgres://user:password@host:port/name?sslmode=require`` (also ``postgresql://``,
  ``pgsql://``); query parameters become ``OPTIONS``.
- Several hosts, as libpq writes them:
  ``postgres://user@db1:5432,db2:5432/name?target_session_attrs=read-write``. ``HOST``
  and ``PORT`` become libpq's comma-separated lists (``"db1,db2"``, ``"5432,5432"``);
  the driver tries each host in turn and, with ``target_session_attrs=read-write``,
  keeps the one that accepts writes (the primary after a failover).
- ``sqlite:///relative/path.sqlite3``, ``sqlite:////absolute/path.sqlite3`` and
  ``sqlite://:memory:``. SQLite gets ``OPTIONS["transaction_mode"] = "IMMEDIATE"``
  unless the query says otherwise (yieldstar's system check ``yieldstar.E001``
  requires it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

__all__ = ["parse_database_url", "sqlite_database"]

POSTGRES_SCHEMES = frozenset({"postgres", "postgresql", "pgsql"})


def sqlite_database(path: str | Path, **options: Any) -> dict[str, Any]:
    """A SQLite ``DATABASES`` entry at ``path`` whose transactions begin ``IMMEDIATE`` and
    wait up to 20 s for the write lock (Python's default: 5 s)."""
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(path),
        "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20, **options},
    }


def parse_database_url(url: str, *, base_dir: Path | None = None) -> dict[str, Any]:
    """Turn ``url`` into a ``DATABASES`` entry. Raises ``ValueError`` for other schemes.

    A relative SQLite path is resolved against ``base_dir`` (default: the current
    directory).
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    options: dict[str, Any] = dict(parse_qsl(parts.query))

    if scheme == "sqlite":
        if "timeout" in options:
            options["timeout"] = float(options["timeout"])
        # sqlite:///rel -> path "/rel" with empty netloc; sqlite:////abs -> "//abs".
        if parts.netloc == ":memory:" or parts.path in {"/:memory:", ":memory:", ""}:
            return sqlite_database(":memory:", **options)
        raw = unquote(parts.path[1:] if parts.path.startswith("/") else parts.path)
        path = Path(raw)
        if not path.is_absolute():
            path = (base_dir or Path.cwd()) / path
        return sqlite_database(path, **options)

    if scheme in POSTGRES_SCHEMES:
        name = unquote(parts.path.lstrip("/"))
        if not name:
            raise ValueError(f"DATABASE_URL {url!r} names no database.")
        if "," in parts.netloc:
            user, password, host, port = _several_hosts(url, parts.netloc)
        else:
            user, password = unquote(parts.username or ""), unquote(parts.password or "")
            host, port = unquote(parts.hostname or ""), str(parts.port or "")
        entry: dict[str, Any] = {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": name,
            "USER": user,
            "PASSWORD": password,
            "HOST": host,
            "PORT": port,
        }
        if options:
            entry["OPTIONS"] = options
        return entry

    raise ValueError(
        f"Unsupported DATABASE_URL scheme {parts.scheme!r}: use postgres:// or sqlite://."
    )


def _several_hosts(url: str, netloc: str) -> tuple[str, str, str, str]:
    """User, password, hosts and ports of ``user:password@h1:p1,h2:p2``; the hosts and
    the ports as libpq's comma-separated lists (ports left out: libpq's default)."""
    userinfo, _, hostlist = netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    hosts: list[str] = []
    ports: list[str] = []
    for item in hostlist.split(","):
        if item.startswith("["):  # [::1]:5432
            host, _, rest = item[1:].partition("]")
            port = rest.removeprefix(":")
        else:
            host, _, port = item.partition(":")
        if not host or (port and not port.isdigit()):
            raise ValueError(f"DATABASE_URL {url!r}: bad host {item!r}.")
        hosts.append(unquote(host))
        ports.append(port)
    return unquote(user), unquote(password), ",".join(hosts), ",".join(ports) if any(ports) else ""
