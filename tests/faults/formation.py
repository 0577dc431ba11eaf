"""A pg_auto_failover formation for the failover test: a monitor, a primary and a
synchronous secondary on this machine (``scripts/failover_cluster.sh``), which the suite's
processes reach with a multi-host URL and ``target_session_attrs=read-write``.

It stands in for :class:`~tests.faults.conftest.PgCluster` in a test's world: the test
process reads the database through the same multi-host connection string, so it reads
the primary of the moment.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from tests.e2e.conftest import ROOT

from .conftest import DB_NAME, PgCluster

SCRIPT = ROOT / "scripts" / "failover_cluster.sh"


def available() -> str:
    """Why the formation cannot be made here ("" when it can)."""
    if shutil.which("pg_autoctl") is None:
        return (
            "pg_autoctl is not installed (apt-get install postgresql-15-auto-failover "
            "pg-auto-failover-cli; scripts/test.sh does)"
        )
    return ""


@dataclass
class Formation(PgCluster):
    """The formation under ``directory``: the monitor on ``monitor_port``, node1 (the
    first primary) on ``port``, node2 on ``standby_port``."""

    monitor_port: int = 0
    standby_port: int = 0
    #: Seconds ``create`` took (made, synchronous, ready for writes).
    created_in: float = 0.0
    killed: list[str] = field(default_factory=list)

    @property
    def conninfo(self) -> str:
        return (
            f"host=127.0.0.1,127.0.0.1 port={self.port},{self.standby_port} user=postgres "
            "target_session_attrs=read-write connect_timeout=2"
        )

    @property
    def database_url(self) -> str:
        return (
            f"postgres://postgres@127.0.0.1:{self.port},127.0.0.1:{self.standby_port}/"
            f"{DB_NAME}?target_session_attrs=read-write"
        )

    def _script(self, *args: str, timeout: float = 240) -> str:
        done = subprocess.run(
            ["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout
        )
        if done.returncode != 0:
            raise AssertionError(f"failover_cluster.sh {args[0]} failed:\n{done.stderr[-3000:]}")
        return done.stdout

    def init(self) -> None:
        started = time.monotonic()
        self._script(
            "create", str(self.directory), str(self.monitor_port), str(self.port),
            str(self.standby_port), DB_NAME,
        )  # fmt: skip
        self.created_in = time.monotonic() - started

    def start(self) -> None:  # the nodes run from init() on
        pass

    def destroy(self) -> None:
        subprocess.run(["bash", str(SCRIPT), "destroy", str(self.directory)], check=False)

    def state(self) -> str:
        return self._script("state", str(self.directory))

    def settings_env(self) -> dict[str, str]:
        return {"YIELDSTAR_FAULTS_DATABASE_URL": self.database_url}

    def connect(self, dbname: str = DB_NAME) -> psycopg.Connection[Any]:
        """A connection to the primary of the moment (retried for up to 60 s)."""
        deadline = time.monotonic() + 60
        while True:
            try:
                return psycopg.connect(f"{self.conninfo} dbname={dbname}", autocommit=True)
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def primary(self) -> str:
        """The node that accepts writes now: ``node1`` or ``node2``."""
        with self.connect() as conn:
            row = conn.execute("SELECT inet_server_port()").fetchone()
        assert row is not None
        return "node1" if int(row[0]) == self.port else "node2"

    def synchronous(self) -> str:
        """The primary's ``synchronous_standby_names`` ("" when it waits for no standby)."""
        with self.connect() as conn:
            row = conn.execute("SHOW synchronous_standby_names").fetchone()
        assert row is not None
        return str(row[0])

    def kill_primary(self) -> tuple[str, float]:
        """SIGKILL every process of the primary's node (its keeper, postmaster and
        backends), as if its machine died; the node and when (``time.time()``)."""
        node = self.primary()
        self._script("kill", str(self.directory), node)
        self.killed.append(node)
        return node, time.time()

    def environ(self) -> dict[str, str]:
        return {**os.environ, **self.settings_env()}


def make_formation(directory: Path, ports: tuple[int, int, int]) -> Formation:
    monitor, first, second = ports
    return Formation(directory, first, monitor_port=monitor, standby_port=second)
