"""End-to-end fixtures: real Celery workers (subprocesses), the relay, and brokers.

Every test here runs once with Redis and once with RabbitMQ as the broker (the ``broker``
fixture). Redis is a private ``redis-server`` on a free port that this suite starts (and
may stop, to test an outage), so other tests and other runs are not disturbed; RabbitMQ is the
local server (127.0.0.1:5672), reached through a TCP proxy the suite can cut. Each run of
the suite uses queues of its own.

The workers and the relay use pytest-django's test database (its name is passed in the
environment), so tests use ``transactional_db``: what a test writes is committed and
visible to them. Waiting is polling with a deadline; nothing asserts on speed.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from django.conf import settings
from django.test import override_settings

from tests.paths import ROOT
from tests.polling import wait_until
from yieldstar_django.models import ExecutionStep
from yieldstar_django.runtime import get_execution

from .proxy import TcpProxy
from .timing import E2E_YIELDSTAR

RABBITMQ = ("127.0.0.1", 5672)
BROKERS = ["redis", "amqp"]

#: What a Celery worker logs once it consumes.
WORKER_READY = " ready."

#: Marks for every end-to-end module: ``pytestmark = E2E_MARKS``.
E2E_MARKS = [pytest.mark.postgres, pytest.mark.celery, pytest.mark.slow]


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RedisServer:
    """A private redis-server; ``stop()``/``start()`` simulate an outage."""

    port: int
    directory: Path

    def start(self) -> None:
        subprocess.run(
            [
                "redis-server", "--daemonize", "yes", "--bind", "127.0.0.1",
                "--port", str(self.port), "--save", "", "--appendonly", "no",
                "--dir", str(self.directory), "--logfile", str(self.directory / "redis.log"),
            ],
            check=True,
        )  # fmt: skip
        wait_until("redis-server to listen", lambda: _port_open("127.0.0.1", self.port), 15)

    def stop(self) -> None:
        subprocess.run(
            ["redis-cli", "-p", str(self.port), "shutdown", "nosave"],
            check=False,
            capture_output=True,
        )
        wait_until("redis-server to stop", lambda: not _port_open("127.0.0.1", self.port), 15)


@dataclass
class Broker:
    """The broker of one parametrisation: its URL, and how to take it down and back."""

    kind: str
    url: str
    down: Callable[[], None]
    up: Callable[[], None]


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        pytest.skip("redis-server / redis-cli are not installed")
    directory = Path(tempfile.mkdtemp(prefix="yieldstar-e2e-redis-"))
    server = RedisServer(_free_port(), directory)
    server.start()
    yield server
    server.stop()
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def amqp_proxy() -> Iterator[TcpProxy]:
    if not _port_open(*RABBITMQ):
        pytest.skip("RabbitMQ is not reachable at 127.0.0.1:5672")
    proxy = TcpProxy(RABBITMQ)
    proxy.start()
    yield proxy
    proxy.stop()


@pytest.fixture(scope="module", params=BROKERS)
def broker(request: pytest.FixtureRequest) -> Broker:
    if request.param == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        return Broker("redis", f"redis://127.0.0.1:{server.port}/0", server.stop, server.start)
    proxy: TcpProxy = request.getfixturevalue("amqp_proxy")
    return Broker("amqp", f"amqp://guest:guest@127.0.0.1:{proxy.port}//", proxy.stop, proxy.start)


@dataclass
class Env:
    """What the processes of one module share: broker, queue, test database."""

    broker: Broker
    queue: str
    db_name: str
    app: Celery
    logs: Path
    processes: list[Process] = field(default_factory=list)

    def environ(self) -> dict[str, str]:
        return {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.e2e.worker_settings",
            "YIELDSTAR_E2E_DB_NAME": self.db_name,
            "YIELDSTAR_E2E_BROKER_URL": self.broker.url,
            # Celery reads this variable over its configuration: left as inherited, it
            # would point the workers at another broker than the one under test.
            "CELERY_BROKER_URL": self.broker.url,
            "YIELDSTAR_E2E_QUEUE": self.queue,
            "PYTHONUNBUFFERED": "1",
        }

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Process:
        log = self.logs / f"{name}-{len(self.processes)}.log"
        handle = log.open("wb")
        popen = subprocess.Popen(
            argv, cwd=ROOT, env={**self.environ(), **(env or {})}, stdout=handle,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        handle.close()
        process = Process(name, popen, log)
        self.processes.append(process)
        return process

    def start_worker(
        self,
        name: str = "worker",
        *,
        concurrency: int = 2,
        wait: bool = True,
        env: dict[str, str] | None = None,
        pool: str = "prefork",
    ) -> Process:
        """A worker on the module's queue; ``env`` adds to its environment (see
        ``worker_settings``)."""
        worker = self.spawn(
            name,
            [
                sys.executable, "-m", "celery", "-A", "tests.e2e.celery_app", "worker",
                "-Q", self.queue, "-P", pool, "-c", str(concurrency), "--loglevel=INFO",
                "--without-mingle", "--without-gossip", "--without-heartbeat",
                "-n", f"{name}-{uuid.uuid4().hex[:6]}@%h",
            ],
            env,
        )  # fmt: skip
        if wait:
            worker.wait_ready()
        return worker

    def start_relay(self) -> Process:
        relay = self.spawn("relay", [sys.executable, "manage.py", "yieldstar_relay"])
        wait_until("the relay to start", lambda: relay.ready("yieldstar relay on"), 60)
        return relay

    def handled(self, task_ids: list[str]) -> bool:
        """Whether the workers' logs show each of ``task_ids`` finished (succeeded)."""
        logs = "".join(p.output() for p in self.processes if p.name.startswith("worker"))
        return all(f"[{task_id}] succeeded" in logs for task_id in task_ids)

    def stop_all(self) -> None:
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def wait_ready(self, timeout: float = 60) -> None:
        """Wait until this Celery worker consumes."""
        wait_until(f"the {self.name} to be ready", lambda: self.ready(WORKER_READY), timeout)

    def pids(self) -> set[int]:
        """The pids of this process and its descendants (a worker's pool processes)."""
        found = {self.popen.pid}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if os.getpgid(int(entry.name)) == self.popen.pid:
                        found.add(int(entry.name))
                except ProcessLookupError:
                    continue
        return found

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the process group (a worker and its pool)."""
        os.killpg(self.popen.pid, signum)

    def ready(self, marker: str) -> bool:
        if self.popen.poll() is not None:
            raise AssertionError(f"{self.name} exited:\n{self.output()[-3000:]}")
        return marker in self.output()

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL the process and all its children (a machine losing power)."""
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.popen.wait(10)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


def attempts(marker_dir: Path) -> list[str]:
    """The pids of the attempts at ``e2e.slow_step``'s first step, one line each."""
    path = marker_dir / "attempts"
    return path.read_text().splitlines() if path.exists() else []


def kill_mid_step_and_rescue(
    e2e: Env, doomed: Process, execution_id: str, marker_dir: Path, timeout: float = 90.0
) -> None:
    """SIGKILL ``doomed`` in the middle of ``e2e.slow_step``'s first step, start a
    ``rescuer`` worker and wait for the execution to complete there: the step ran again
    in the new worker (twice in all) and was recorded once."""
    doomed.kill()
    e2e.start_worker("rescuer")
    wait_until(
        "the execution to complete", lambda: get_execution(execution_id).is_finished, timeout
    )
    execution = get_execution(execution_id)
    assert execution.status == "completed", execution.error
    assert execution.result[0] == 2
    assert len(attempts(marker_dir)) == 2
    assert ExecutionStep.objects.filter(execution_id=execution_id, step_key="0").count() == 1
    assert execution.runs >= 2


def delete_queue(app: Celery, url: str, queue: str) -> None:
    """Delete the module's queue and its exchange (Celery names both after the queue) from
    the shared RabbitMQ at ``url`` (given: the app's ``broker_url`` reads
    ``CELERY_BROKER_URL`` first); a private Redis goes away with its server."""
    try:
        with app.connection_for_write(url) as connection:
            channel = connection.default_channel
            channel.queue_delete(queue)
            channel.exchange_delete(queue)
    except Exception:  # never declared (no worker, no publish) or unreachable: nothing to do
        pass


@pytest.fixture(scope="module")
def e2e(
    broker: Broker, django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Env]:
    """The module's broker, queue, producer app and log folder (no process yet)."""
    from django.db import connection

    queue = f"yieldstar-e2e-{uuid.uuid4().hex[:8]}"
    app = Celery("yieldstar_e2e_client", broker=broker.url, set_as_current=False)
    app.conf.task_default_queue = queue
    app.conf.broker_connection_retry_on_startup = True
    # A producer that fails fast while the broker is down (the relay retries later).
    app.conf.broker_transport_options = {
        "max_retries": 1,
        "interval_start": 0,
        "interval_step": 0.2,
    }
    app.conf.task_publish_retry_policy = {
        "max_retries": 1,
        "interval_start": 0,
        "interval_step": 0.2,
    }
    from celery import _state

    previous = _state.default_app
    app.set_default()
    app.set_current()
    env = Env(broker, queue, connection.settings_dict["NAME"], app, tmp_path_factory.mktemp("logs"))
    # Celery's broker_url reads this variable first, even for an app given a broker.
    inherited = os.environ.get("CELERY_BROKER_URL")
    os.environ["CELERY_BROKER_URL"] = broker.url
    try:
        with override_settings(YIELDSTAR={**settings.YIELDSTAR, **E2E_YIELDSTAR}):
            yield env
    finally:
        if inherited is None:
            del os.environ["CELERY_BROKER_URL"]
        else:
            os.environ["CELERY_BROKER_URL"] = inherited
    env.stop_all()
    if broker.kind == "amqp":
        delete_queue(app, broker.url, queue)
    app.close()
    _state.set_default_app(previous)
    if previous is not None:
        previous.set_current()


@pytest.fixture(scope="module")
def services(e2e: Env) -> Iterator[Env]:
    """A worker and a relay for the whole module."""
    e2e.start_worker()
    e2e.start_relay()
    yield e2e
    e2e.stop_all()


#: The test process's ``deadlock_timeout`` during end-to-end tests: longer than the workers'
#: (PostgreSQL's default, 1 s), so that a deadlock between a test's flush and a run still
#: going in a worker is broken in the worker (whose task retries), not in the flush.
FLUSH_DEADLOCK_TIMEOUT = "10s"


@pytest.fixture(scope="module", autouse=True)
def _reset_deadlock_timeout(django_db_blocker: Any) -> Iterator[None]:
    """Give the test process's connection its ``deadlock_timeout`` back once the module's
    last test was flushed (module fixtures end after their tests' teardowns)."""
    yield
    from django.db import connection

    if connection.vendor == "postgresql" and connection.connection is not None:
        with django_db_blocker.unblock(), connection.cursor() as cursor:
            cursor.execute("RESET deadlock_timeout")


@pytest.fixture(autouse=True)
def _flush_wins_deadlocks(request: pytest.FixtureRequest) -> None:
    """After a test, pytest-django flushes the test database: a ``TRUNCATE`` of every table,
    which may meet a resume still running in a worker, each waiting for a lock the other
    holds. PostgreSQL breaks a deadlock in the session whose ``deadlock_timeout`` passes
    first; without this, that was the flush (it waited first), and the test failed in its
    teardown, its rows left to the next tests. Reset at the module's end."""
    marker = request.node.get_closest_marker("django_db")
    transactional = marker is not None and marker.kwargs.get("transaction")
    if not transactional and "transactional_db" not in request.fixturenames:
        return
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"SET deadlock_timeout = '{FLUSH_DEADLOCK_TIMEOUT}'")


@pytest.fixture(autouse=True)
def _e2e_wakes(request: pytest.FixtureRequest) -> Iterator[None]:
    """Import the e2e workflows in the test process too (start_workflow needs them)."""
    import tests.e2e.workflows  # noqa: F401

    yield
