"""``DATABASE_URL`` parsing used by the test and demo settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from demo_project.dburl import parse_database_url


def test_postgres() -> None:
    entry = parse_database_url("postgres://postgres@127.0.0.1:5432/yieldstar")
    assert entry == {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "yieldstar",
        "USER": "postgres",
        "PASSWORD": "",
        "HOST": "127.0.0.1",
        "PORT": "5432",
    }


def test_postgres_quoted_password_and_options() -> None:
    entry = parse_database_url("postgresql://u:p%40ss@db.example/app?sslmode=require")
    assert entry["PASSWORD"] == "p@ss"
    assert entry["HOST"] == "db.example"
    assert entry["PORT"] == ""
    assert entry["OPTIONS"] == {"sslmode": "require"}


def test_postgres_several_hosts_for_a_failover() -> None:
    entry = parse_database_url(
        "postgres://app:s%40cret@10.0.0.1:5433,db2,[::1]:5434/app"
        "?target_session_attrs=read-write&connect_timeout=2"
    )
    assert entry["USER"] == "app"
    assert entry["PASSWORD"] == "s@cret"
    assert entry["HOST"] == "10.0.0.1,db2,::1"
    assert entry["PORT"] == "5433,,5434"
    assert entry["OPTIONS"] == {"target_session_attrs": "read-write", "connect_timeout": "2"}
    same_port = parse_database_url("postgres://u@a,b/app")
    assert (same_port["HOST"], same_port["PORT"]) == ("a,b", "")


def test_sqlite_relative_and_absolute(tmp_path: Path) -> None:
    relative = parse_database_url("sqlite:///var/x.sqlite3", base_dir=tmp_path)
    assert relative["NAME"] == str(tmp_path / "var" / "x.sqlite3")
    assert relative["OPTIONS"] == {"transaction_mode": "IMMEDIATE", "timeout": 20}
    absolute = parse_database_url(f"sqlite:///{tmp_path}/y.sqlite3")
    assert absolute["NAME"] == str(tmp_path / "y.sqlite3")


def test_sqlite_memory_and_options() -> None:
    assert parse_database_url("sqlite://:memory:")["NAME"] == ":memory:"
    entry = parse_database_url("sqlite:///:memory:?transaction_mode=EXCLUSIVE&timeout=3")
    assert entry["OPTIONS"] == {"transaction_mode": "EXCLUSIVE", "timeout": 3.0}


@pytest.mark.parametrize(
    "url", ["mysql://root@localhost/x", "postgres://localhost/", "postgres://a:x,b/app"]
)
def test_rejected(url: str) -> None:
    with pytest.raises(ValueError):
        parse_database_url(url)
