"""The fault suite's harness: a throwaway PostgreSQL cluster, brokers, real processes.

Everything that runs yieldstar is a subprocess with ``tests.faults.settings``: Celery
workers, the relay and the driver (the producer). They talk to a PostgreSQL cluster this
suite creates with ``initdb`` on a free port (so it can restart it with ``-m immediate``
without touching the machine's server), and to a private ``redis-server`` or the local
RabbitMQ through a TCP proxy (the e2e suite's fixtures). Each process records its store
operations in the test's history folder; :meth:`Faults.verify` runs the checker on it,
waits for every execution to finish and for no wake intent to be overdue.

The test process itself reads the database with plain ``psycopg``, never through the
runtime. Figures (anomalies, recovery times) are printed at the end of the run and
appended to ``var/faults/figures.jsonl``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.e2e.conftest import (
    ROOT,
    Broker,
    Process,
    _free_port,
    amqp_proxy,
    redis_server,
    wait_until,
)
from tests.e2e.proxy import TcpProxy
from yieldstar_django.models.runtime import TERMINAL_STATUSES

from .checker import check_entries, check_queue, check_register, load_history
from .figures import FIGURES
from .history import ENV as HISTORY_ENV, EXIT_ENV, INITIAL, ROLE_ENV

__all__ = ["amqp_proxy", "redis_server"]

PG_BIN = Path(os.environ.get("YIELDSTAR_FAULTS_PG_BIN", "/usr/lib/postgresql/15/bin"))
DB_NAME = "yieldstar_faults"

#: Marks for every fault module: ``pytestmark = FAULT_MARKS``.
FAULT_MARKS = [pytest.mark.faults, pytest.mark.celery, pytest.mark.slow]


def _as_postgres(argv: list[str]) -> list[str]:
    """PostgreSQL's tools refuse to run as root: run them as the ``postgres`` user then."""
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


@dataclass
class PgCluster:
    """A throwaway cluster: ``initdb`` in a temporary folder, listening on a free port."""

    directory: Path
    port: int

    @property
    def data(self) -> Path:
        return self.directory / "data"

    def _ctl(self, *args: str) -> None:
        subprocess.run(
            _as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.data), *args]),
            check=True,
            capture_output=True,
        )

    def init(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.directory, "postgres", "postgres")
        subprocess.run(
            _as_postgres(
                [str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres",
                 "--auth=trust", "-E", "UTF8", "--no-sync"]
            ),
            check=True,
            capture_output=True,
        )  # fmt: skip

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c max_connections=200"
        )
        self._ctl("-l", str(self.directory / "postgres.log"), "-o", options, "-w", "start")

    def crash(self) -> None:
        """Stop at once, as after a power loss: no checkpoint, crash recovery on start."""
        self._ctl("-m", "immediate", "-w", "stop")

    def destroy(self) -> None:
        try:
            self.crash()
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.directory, ignore_errors=True)

    def connect(self, dbname: str = DB_NAME) -> psycopg.Connection[Any]:
        return psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname=dbname, autocommit=True
        )

    def settings_env(self) -> dict[str, str]:
        """What the suite's processes need to reach this cluster (``tests.faults.settings``)."""
        return {"YIELDSTAR_FAULTS_PG_PORT": str(self.port)}

    def terminate_backends(self) -> int:
        """``pg_terminate_backend`` every other connection to the suite's database."""
        with self.connect() as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                [DB_NAME],
            ).fetchall()
        return len(rows)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    if not (PG_BIN / "initdb").exists():
        pytest.skip(f"PostgreSQL server binaries are not in {PG_BIN} (YIELDSTAR_FAULTS_PG_BIN)")
    cluster = PgCluster(Path(tempfile.mkdtemp(prefix="yieldstar-faults-pg-")), _free_port())
    cluster.init()
    cluster.start()
    try:
        with cluster.connect("postgres") as conn:
            conn.execute(f"CREATE DATABASE {DB_NAME}")
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
            cwd=ROOT,
            env={**os.environ, **_settings_env(cluster)},
            check=True,
        )
        yield cluster
    finally:
        cluster.destroy()


def _settings_env(cluster: PgCluster) -> dict[str, str]:
    return {
        "DJANGO_SETTINGS_MODULE": "tests.faults.settings",
        **cluster.settings_env(),
        "PYTHONUNBUFFERED": "1",
    }


@dataclass
class Faults:
    """One test's world: its broker, Celery queue, history folder and processes."""

    name: str
    cluster: PgCluster
    broker: Broker
    directory: Path
    lease_seconds: float = 4.0
    queue: str = field(default_factory=lambda: f"yieldstar-faults-{uuid.uuid4().hex[:8]}")
    processes: list[Process] = field(default_factory=list)
    executions: list[str] = field(default_factory=list)
    #: The executions of ``faults.ledger`` (atomic steps), with the id of their tally.
    ledgers: dict[str, str] = field(default_factory=dict)
    #: Executions that gather children (``faults.fan_out``): their results are no takes.
    parents: set[str] = field(default_factory=set)
    recoveries: list[float] = field(default_factory=list)

    @property
    def history(self) -> Path:
        path = self.directory / "history"
        path.mkdir(exist_ok=True)
        return path

    def environ(self, role: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {
            **os.environ,
            **_settings_env(self.cluster),
            "YIELDSTAR_FAULTS_BROKER_URL": self.broker.url,
            # Celery reads this variable before any configuration: it must not point the
            # processes at another broker than the test's.
            "CELERY_BROKER_URL": self.broker.url,
            "YIELDSTAR_FAULTS_QUEUE": self.queue,
            "YIELDSTAR_FAULTS_LEASE_SECONDS": str(self.lease_seconds),
            HISTORY_ENV: str(self.history),
            ROLE_ENV: role,
            **(extra or {}),
        }

    def spawn(self, role: str, argv: list[str], extra: dict[str, str] | None = None) -> Process:
        log = self.directory / f"{role}-{len(self.processes)}.log"
        with log.open("wb") as handle:
            popen = subprocess.Popen(
                argv, cwd=ROOT, env=self.environ(role, extra), stdout=handle,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        process = Process(role, popen, log)
        self.processes.append(process)
        return process

    def spawn_worker(self, concurrency: int = 2, extra: dict[str, str] | None = None) -> Process:
        """Start a Celery worker (prefork, ``concurrency`` pool processes); not waited for."""
        return self.spawn(
            "worker",
            [
                sys.executable, "-m", "celery", "-A", "tests.e2e.celery_app", "worker",
                "-Q", self.queue, "-c", str(concurrency), "--loglevel=INFO",
                "--without-mingle", "--without-gossip", "--without-heartbeat",
                "-n", f"faults-{uuid.uuid4().hex[:6]}@%h",
            ],
            extra,
        )  # fmt: skip

    def start_workers(
        self, count: int = 2, concurrency: int = 2, extra: dict[str, str] | None = None
    ) -> list[Process]:
        """Start ``count`` workers and wait until they are ready."""
        workers = [self.spawn_worker(concurrency, extra) for _ in range(count)]
        for worker in workers:
            worker.wait_ready(90)
        return workers

    def start_relay(self) -> Process:
        relay = self.spawn("relay", [sys.executable, "manage.py", "yieldstar_relay"])
        wait_until("the relay to start", lambda: relay.ready("yieldstar relay on"), 90)
        return relay

    def driver(
        self, *args: str, extra: dict[str, str] | None = None, exit_code: int = 0
    ) -> list[str]:
        """Run the driver to completion (it must exit with ``exit_code``); its output."""
        done = subprocess.run(
            [sys.executable, "-m", "tests.faults.driver", *args],
            cwd=ROOT,
            env=self.environ("driver", extra),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == exit_code, done.stderr[-3000:]
        return done.stdout.split()

    def push_in_background(self, queue_id: str, prefix: str, count: int, pause: float) -> Process:
        return self.spawn(
            "driver",
            [sys.executable, "-m", "tests.faults.driver", "push", queue_id, prefix,
             str(count), str(pause)],
        )  # fmt: skip

    def start(self, workflow: str, arguments: list[list[Any]]) -> list[str]:
        ids = self.driver("start", workflow, json.dumps(arguments))
        self.executions += ids
        return ids

    # -- reading the outcome -------------------------------------------------------------

    def _column(self, column: str) -> dict[str, Any]:
        """One column of the test's executions, by execution id."""
        query = sql.SQL("SELECT id, {} FROM yieldstar_execution WHERE id = ANY(%s)")
        with self.cluster.connect() as conn:
            rows = conn.execute(query.format(sql.Identifier(column)), [self.executions]).fetchall()
        return dict(rows)

    def statuses(self) -> dict[str, str]:
        return self._column("status")

    def results(self) -> dict[str, Any]:
        return {
            e: json.loads(raw) if raw else None for e, raw in self._column("result_json").items()
        }

    def finished(self) -> bool:
        statuses = self.statuses()
        return all(statuses.get(e) in {"completed", "failed", "cancelled"} for e in self.executions)

    def unfinished_after(self, timeout: float) -> list[tuple[Any, ...]]:
        """Wait up to ``timeout`` for every execution to finish; the rows of those that
        did not (id, status, runs, wake_pending, lease_expires_at)."""
        try:
            wait_until("every execution to finish", self.finished, timeout)
            return []
        except AssertionError:
            with self.cluster.connect() as conn:
                return conn.execute(
                    "SELECT id, status, runs, wake_pending, lease_expires_at FROM "
                    "yieldstar_execution WHERE id = ANY(%s) AND status NOT IN "
                    "('completed', 'failed', 'cancelled')",
                    [self.executions],
                ).fetchall()

    def overdue_intents(self, grace: float = 5.0) -> int:
        with self.cluster.connect() as conn:
            row = conn.execute(
                "SELECT count(*) FROM yieldstar_wakeintent WHERE delivered_at IS NULL "
                "AND available_at < now() - make_interval(secs => %s)",
                [grace],
            ).fetchone()
        assert row is not None
        return int(row[0])

    def anomalies(self, drained: bool = True) -> list[str]:
        """The checker's verdict on every store's history and on the drained queues.

        ``drained=False`` (some taker did not finish): items not taken yet cannot be told
        from lost ones, so only duplicated and invented items are looked for."""
        found: list[str] = []
        stores = load_history(self.history)
        pushed: dict[str, list[Any]] = {}
        maybe: dict[str, list[Any]] = {}
        for store, ops in stores.items():
            name = store.split("/", 1)[0]
            found += [f"{store}: {a}" for a in check_register(ops, INITIAL[name])]
            if name == "faults.queue":
                for op in ops:
                    if op.args.get("kind") == "push":
                        target = pushed if op.result is not None else maybe
                        target.setdefault(store, []).extend(op.args["values"])
        results = self.results()
        found += self.entry_anomalies(results)
        taken = {
            eid: r
            for eid, r in results.items()
            if r is not None and eid not in self.ledgers and eid not in self.parents
        }
        certain = [v for vs in pushed.values() for v in vs]
        uncertain = [v for vs in maybe.values() for v in vs]
        if drained:
            found += check_queue(certain, taken, uncertain)
        else:
            found += check_queue([], taken, certain + uncertain)
        return found

    def entry_anomalies(self, results: dict[str, Any]) -> list[str]:
        """The checker's verdict on the rows the ledgers' atomic steps wrote (read from the
        table, ``yieldstar_tests_entry``) against what their steps returned and their
        tallies' totals (``check_entries``)."""
        if not self.ledgers:
            return []
        ids = list(self.ledgers)
        with self.cluster.connect() as conn:
            rows = conn.execute(
                "SELECT execution_id, step, token FROM yieldstar_tests_entry "
                "WHERE execution_id = ANY(%s)",
                [ids],
            ).fetchall()
            states = dict(
                conn.execute(
                    "SELECT store_id, state FROM yieldstar_storeinstance "
                    "WHERE name = 'faults.tally' AND store_id = ANY(%s)",
                    [list(self.ledgers.values())],
                ).fetchall()
            )
        statuses = self.statuses()
        returned = {
            eid: results.get(eid) if statuses.get(eid) == "completed" else None for eid in ids
        }
        tallies = {
            eid: json.loads(states[tally])["total"] if tally in states else None
            for eid, tally in self.ledgers.items()
        }
        return check_entries([tuple(row) for row in rows], returned, tallies)

    def entries(self) -> int:
        """Rows the ledgers' atomic steps committed."""
        with self.cluster.connect() as conn:
            row = conn.execute(
                "SELECT count(*) FROM yieldstar_tests_entry WHERE execution_id = ANY(%s)",
                [list(self.ledgers)],
            ).fetchone()
        return int(row[0]) if row else 0

    def operations(self) -> int:
        return sum(len(ops) for ops in load_history(self.history).values())

    def first_progress_after(self, moment: float) -> float:
        """Seconds from ``moment`` to the first store operation completed after it."""
        times = [
            op.complete
            for ops in load_history(self.history).values()
            for op in ops
            if op.complete is not None and op.complete > moment
        ]
        assert times, f"no store operation completed after the fault ({self.name})"
        return min(times) - moment

    def claimed_at(self, value: Any) -> float:
        """When the take that claimed the item ``value`` completed."""
        for ops in load_history(self.history).values():
            for op in ops:
                result = op.result or {}
                if op.complete is not None and (result.get("selected") or {}).get("value") == value:
                    return op.complete
        raise AssertionError(f"no completed take claimed {value!r}")

    def count(self, status: str) -> int:
        return sum(1 for s in self.statuses().values() if s == status)

    def waiting_to_be_woken(self) -> int:
        """Executions that wait with a waiter no commit has woken yet (the next change they
        read wakes them), their lease let go."""
        with self.cluster.connect() as conn:
            row = conn.execute(
                "SELECT count(DISTINCT e.id) FROM yieldstar_execution e "
                "JOIN yieldstar_waiter w ON w.execution_id = e.id "
                "WHERE e.id = ANY(%s) AND e.status = 'waiting' AND e.lease_owner = '' "
                "AND w.woken_at IS NULL",
                [self.executions],
            ).fetchone()
        return int(row[0]) if row else 0

    def verify(self, timeout: float = 90.0) -> list[str]:
        """Wait for every execution to finish, then for no wake intent to be overdue, and
        record the figures; the anomalies of the history (the caller asserts there are
        none)."""
        unfinished = self.unfinished_after(timeout)
        found = self.anomalies(drained=not unfinished)
        statuses = self.statuses()
        failed = [e for e, s in statuses.items() if s != "completed"]
        FIGURES.append(
            {
                "fault": self.name,
                "executions": len(self.executions),
                "operations": self.operations(),
                "anomalies": len(found),
                "not_completed": len(failed),
                "recoveries": self.recoveries,  # the test may add more after verify()
            }
        )
        if unfinished:
            assert found == [], found
            raise AssertionError(f"{len(unfinished)} execution(s) unfinished: {unfinished[:10]}")
        wait_until("no wake intent to be overdue", lambda: self.overdue_intents() == 0, 30)
        return found + [f"execution {e} ended {statuses[e]}" for e in failed]

    def stop_all(self) -> None:
        for process in reversed(self.processes):
            if process.popen.poll() is None:
                process.popen.send_signal(signal.SIGTERM)
        for process in reversed(self.processes):
            try:
                process.popen.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
        self.processes.clear()

    def quiesce(self) -> None:
        """After a test (its processes stopped): every execution of the suite's database
        that did not end is cancelled and every wake intent still due acknowledged, so
        that the next test's relay does not hand them to its workers, whose writes its
        checker would find unexplained: a failed test fails alone. The fault tests run
        one at a time (one xdist group), so what is left in the database is a past
        test's. A database that does not answer (a test stopped it) is left as it is."""
        try:
            with self.cluster.connect() as conn:
                conn.execute(
                    "UPDATE yieldstar_wakeintent SET delivered_at = now()"
                    " WHERE delivered_at IS NULL"
                )
                conn.execute(
                    "UPDATE yieldstar_execution SET status = 'cancelled', lease_owner = '',"
                    " finished_at = now() WHERE NOT (status = ANY(%s))",
                    [sorted(TERMINAL_STATUSES)],
                )
        except psycopg.OperationalError:
            pass


@pytest.fixture
def broker(redis_server: Any) -> Broker:
    """The broker a test's world (``faults``) runs on: Redis. A test module that needs
    another overrides this fixture (``test_broker_outage``: ``cut_broker``)."""
    return Broker(
        "redis", f"redis://127.0.0.1:{redis_server.port}/0", redis_server.stop, redis_server.start
    )


@pytest.fixture(params=["redis", "amqp"])
def cut_broker(request: pytest.FixtureRequest, redis_server: Any) -> Iterator[Broker]:
    """Redis, then RabbitMQ, behind a TCP proxy: ``down()`` makes it unreachable (a
    network cut: what the broker holds survives), ``up()`` reachable again."""
    if request.param == "redis":
        proxy = TcpProxy(("127.0.0.1", redis_server.port))
        proxy.start()
        url = f"redis://127.0.0.1:{proxy.port}/0"
    else:
        proxy = request.getfixturevalue("amqp_proxy")
        url = f"amqp://guest:guest@127.0.0.1:{proxy.port}//"
    yield Broker(request.param, url, proxy.stop, proxy.start)
    if request.param == "redis":
        proxy.stop()


@pytest.fixture
def faults(
    request: pytest.FixtureRequest, pg_cluster: PgCluster, broker: Broker, tmp_path: Path
) -> Iterator[Faults]:
    """A test's world on ``broker``; every process it started is stopped afterwards."""
    faults = Faults(f"{request.node.name}", pg_cluster, broker, tmp_path)
    try:
        yield faults
    finally:
        faults.stop_all()
        faults.quiesce()


EXIT_AFTER_COMMIT = EXIT_ENV  # re-exported for the tests
