"""Runtime: wakes and durable steps, against Celery itself and against DBOS.

Every figure is a ratio against a baseline measured in the same run, on the same machine
and the same PostgreSQL:

- **wake latency**: a store update commits, its waiter's execution is resumed by a real
  Celery worker (prefork, ``-c 4`` unless ``BENCH_WORKER_CONCURRENCY`` says otherwise) and
  the take step is recorded in the heap (the version's commit time -> the heap row's
  ``recorded_at``), p50 and p99, against Celery's own enqueue-to-start round trip
  (``send_task`` -> the task starts) on the same broker and worker. Target: p50 within 2x.
  Also against the same round trip of a task sent expecting no result, as wakes are sent
  (the awaited one subscribes the sender to its result first: a Redis round trip).
  And against the least a durable wake does without a runtime (**durable hop**): the
  producer commits a row, then sends a task (no result) whose first statement updates that
  row; from the producer's statement to the task's (both PostgreSQL's ``now()``). Ours
  adds to it the lease, the replay, the take's computation and its commit function.
- **durable steps per second, one execution**: ``step.run`` steps of one execution, run
  in this process, against DBOS ``@DBOS.step`` calls in one ``@DBOS.workflow``.
  Target: at least 6x. Also against the **commit floor**: one raw psycopg ``INSERT`` of a
  heap-like row per step, each its own commit, which is what durable steps of one
  execution cost at least on this machine's WAL flush (and so bounds the ratio to DBOS).
- **durable steps per second, many executions**: executions of a few steps each, run by
  the Celery worker, against the same DBOS workflows started with ``DBOS.start_workflow``
  (its thread pool) in one process. Target: at least 3x.
- **notify-to-resume latency**: the wake latency above, against DBOS ``send`` -> ``recv``
  returning in the waiting workflow (DBOS runs in-process and listens with LISTEN/NOTIFY;
  ours crosses the broker to a worker process).
- **resume after a burst**: a woken take's resume in this process, on a connection whose
  plans were made on small runtime tables, after a burst of 20,000 executions (5,000 with
  ``--quick``) with their heap rows and intents and no ``ANALYZE``, once the relay's upkeep
  analyzed the tables that grew, against the same resume before the burst (and, in the
  note, before the upkeep).
- **resumes per item against takers**: 1, 20, 100 and 1,000 executions (1 to 8 with
  ``--quick``) wait on a take from one queue (one selector: a cohort); items are pushed
  one at a time, each after the previous one was taken; the figure is the takers' runs
  per item (less those before the first item), with the store wakes per item, against
  a single taker.

Environment: ``BENCH_DATABASE_URL`` (default ``postgres://postgres@127.0.0.1:5432/
yieldstar_bench_runtime``, dropped and created afresh when this suite runs first; DBOS gets
a system database named after it with ``_dbos``), ``BENCH_BROKER_URL`` (default
``redis://127.0.0.1:6379/13``). DBOS is the ``bench`` extra (``pip install -e
'.[bench]'``); without it its rows are skipped with the reason.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.polling import wait_until

from .databases import configure_dbos, create_database, start_dbos
from .table import Row, Series

SUITE = "runtime"
#: The commit floor's table, in the bench database (dropped with it).
STEP_FLOOR = "bench_step_floor"
ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/yieldstar_bench_runtime"
DEFAULT_BROKER = "redis://127.0.0.1:6379/13"
#: Worker processes (prefork). Steps wait on fsync more than on the CPU, so two per core.
WORKER_CONCURRENCY = int(os.environ.get("BENCH_WORKER_CONCURRENCY", "4"))


def drop_wakes(wakes: Any) -> None:
    """A ``WAKE_BACKEND`` for in-process runs: no worker should see these executions."""


# -- setup ----------------------------------------------------------------------------------


def _setup_django() -> None:
    """Django on a freshly created benchmark database (so its SQL functions are current),
    unless another suite of this run set Django up already."""
    os.environ.setdefault("BENCH_DATABASE_URL", DEFAULT_DB)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.worker_settings")
    from django.apps import apps

    if not apps.ready:
        create_database(os.environ["BENCH_DATABASE_URL"], afresh=True)
        import django

        django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    import bench.workflows  # noqa: F401  (registered even if this process has other settings)


@contextmanager
def _yieldstar(**values: Any) -> Iterator[None]:
    from django.conf import settings

    from yieldstar_django.conf import yieldstar_settings

    previous = getattr(settings, "YIELDSTAR", {})
    settings.YIELDSTAR = {**previous, **values}
    yieldstar_settings.reload()
    try:
        yield
    finally:
        settings.YIELDSTAR = previous
        yieldstar_settings.reload()


class Worker:
    """A Celery worker subprocess on a queue of this run, and the producer app."""

    def __init__(self, broker: str, concurrency: int | None = None) -> None:
        from celery import Celery

        self.queue = f"yieldstar-bench-{uuid.uuid4().hex[:8]}"
        self.app = Celery("yieldstar_bench_producer", broker=broker, backend=broker)
        self.app.conf.task_default_queue = self.queue
        self.app.set_default()
        self.app.set_current()
        self.log = ROOT / "var" / "bench-worker.log"
        self.log.parent.mkdir(exist_ok=True)
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "bench.worker_settings",
            "BENCH_BROKER_URL": broker,
            "BENCH_QUEUE": self.queue,
        }
        with self.log.open("wb") as handle:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "bench.celery_app", "worker",
                 "-Q", self.queue, "-c", str(concurrency or WORKER_CONCURRENCY),
                 "--loglevel=WARNING",
                 "--without-mingle", "--without-gossip", "--without-heartbeat"],
                cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.app.send_task("bench.ping").get(timeout=120)  # ready

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.app.close()

    def relay(self) -> subprocess.Popen[bytes]:
        """``manage.py yieldstar_relay`` for this worker's queue, as a deployment runs one
        beside its workers: it delivers overdue wakes and its upkeep analyzes the tables
        that outgrew their statistics (which a database with autovacuum off, or not yet
        round, would otherwise plan as small). The caller terminates it."""
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "bench.worker_settings",
            "BENCH_QUEUE": self.queue,
        }
        with (ROOT / "var" / "bench-relay.log").open("wb") as handle:
            return subprocess.Popen(
                [sys.executable, "-m", "django", "yieldstar_relay"],
                cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT,
            )  # fmt: skip


def _wait(what: str, done: Callable[[], bool], timeout: float = 300.0) -> None:
    """Wait for ``done`` as a benchmark does: patiently, and looking every 10 ms."""
    wait_until(what, done, timeout, interval=0.01)


def _quantile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# -- our side -------------------------------------------------------------------------------


def wake_latencies(n: int, spacing: float) -> tuple[list[float], list[float]]:
    """Seconds from a store commit to the woken take recorded, ``n`` times; and the same
    from the producer calling ``update_store`` (its read and compute included).

    The commit time is the version row's ``created_at``, which PostgreSQL sets to the start
    of the committing statement; both clocks are this machine's.
    """
    from yieldstar_django import get_store_client
    from yieldstar_django.models import Execution, ExecutionStep, StoreVersion
    from yieldstar_django.runtime import start_workflow

    from .workflows import inbox

    client = get_store_client()
    run = uuid.uuid4().hex[:8]
    ids = {start_workflow("bench.wait_take", f"{run}-{k}"): f"{run}-{k}" for k in range(n)}
    _wait(
        "executions to wait",
        lambda: Execution.objects.filter(pk__in=ids, status="waiting").count() == n,
    )
    called: dict[str, float] = {}
    versions: dict[str, int] = {}
    for execution_id, store_id in ids.items():
        time.sleep(spacing)
        called[execution_id] = time.time()
        result = client.update_store(inbox, store_id, updater=lambda d: d["items"].append(1))
        versions[store_id] = result.version
    _wait(
        "executions to complete",
        lambda: Execution.objects.filter(pk__in=ids, status="completed").count() == n,
    )
    recorded: dict[str, datetime] = {
        execution_id: at
        for execution_id, at in ExecutionStep.objects.filter(
            execution_id__in=ids, step_key="0"
        ).values_list("execution_id", "recorded_at")
        if at is not None  # every take here is recorded: the executions completed
    }
    committed = {
        (v.store_id, v.version): v.created_at
        for v in StoreVersion.objects.filter(store_name=inbox.name, store_id__in=ids.values())
    }
    from_commit = [
        (recorded[e] - committed[(s, versions[s])]).total_seconds() for e, s in ids.items()
    ]
    from_call = [recorded[e].timestamp() - called[e] for e in ids]
    return from_commit, from_call


def drain_queue(
    takers: int, timeout: float = 300.0, *, at_once: bool = False
) -> tuple[float, float]:
    """``takers`` executions wait on a take from one queue store; items are pushed one at
    a time, each after the previous one was taken (``at_once``: all in one commit).
    Returns the resumes per item (runs of the takers, counted when a worker takes an
    execution's lease, less those before the first item, over the items) and the store
    wakes per item (wake intents the commits wrote)."""
    from django.db.models import Sum

    from yieldstar_django import get_store_client
    from yieldstar_django.models import Execution, Waiter, WakeIntent
    from yieldstar_django.runtime import start_workflow

    from .workflows import inbox

    client = get_store_client()
    store_id = f"queue-{uuid.uuid4().hex[:8]}"
    ids = [start_workflow("bench.wait_take", store_id) for _ in range(takers)]
    executions = Execution.objects.filter(pk__in=ids)
    _wait(
        "takers to wait",
        lambda: executions.filter(status="waiting").count() == takers,
        timeout,
    )

    def settled() -> bool:
        """No taker running, no wake of a live taker still to be acknowledged, and no
        waiter woken and not yet registered again (a taker about to check)."""
        live = executions.exclude(status="completed")
        return not (
            live.filter(status="running").exists()
            or WakeIntent.objects.filter(
                execution_id__in=live.values("pk"), reason="store", delivered_at__isnull=True
            ).exists()
            or Waiter.objects.filter(
                execution_id__in=live.values("pk"), woken_at__isnull=False
            ).exists()
        )

    # Every taker ran and registered its waiter, unwoken; runs before the first item (a
    # taker that read the store before another's take created it ran again) are not the
    # items' cost.
    _wait(
        "the takers to register",
        lambda: Waiter.objects.filter(execution_id__in=ids).count() == takers and settled(),
        timeout,
    )
    before = executions.aggregate(total=Sum("runs"))["total"]
    if at_once:
        client.update_store(inbox, store_id, updater=lambda d: d["items"].extend([1] * takers))
        _wait(
            "every item to be taken",
            lambda: not executions.exclude(status="completed").exists(),
            timeout,
        )

    def completed(count: int) -> Callable[[], bool]:
        return lambda: executions.filter(status="completed").count() == count

    for item in range(0 if at_once else takers):
        client.update_store(inbox, store_id, updater=lambda d: d["items"].append(1))
        _wait(f"item {item} to be taken", completed(item + 1), timeout)
        # The herd this item woke settles before the next one arrives (at most 2 s: a wake
        # that landed on a held lease is run by the holder and may stay unacknowledged).
        deadline = time.monotonic() + 10.0
        while not settled() and time.monotonic() < deadline:
            time.sleep(0.01)
    time.sleep(0.2)  # wakes still queued find their execution finished (no run counted)
    runs = executions.aggregate(total=Sum("runs"))["total"]
    wakes = WakeIntent.objects.filter(execution_id__in=ids, reason="store").count()
    return (runs - before) / takers, wakes / takers


def celery_latencies(worker: Worker, n: int, spacing: float) -> list[float]:
    """Seconds from ``send_task`` to the task starting in the worker, ``n`` times."""
    results = []
    for _ in range(n):
        time.sleep(spacing)
        sent = time.time()
        results.append((sent, worker.app.send_task("bench.ping")))
    return [result.get(timeout=60) - sent for sent, result in results]


def celery_latencies_without_result(worker: Worker, n: int, spacing: float) -> list[float]:
    """The same baseline sent as wakes are, expecting no result (``ignore_result``, which
    spares the sender a subscription to the result): each task notes when it started in
    a file this process reads afterwards."""
    notes = ROOT / "var" / f"bench-pings-{uuid.uuid4().hex[:8]}"
    sent = []
    for number in range(n):
        time.sleep(spacing)
        sent.append(time.time())
        worker.app.send_task("bench.ping_noted", args=[str(notes), number], ignore_result=True)

    def started() -> dict[int, float]:
        lines = notes.read_text().splitlines() if notes.exists() else []
        return {int(number): float(at) for number, at in (line.split() for line in lines)}

    _wait("the pings to start", lambda: len(started()) == n)
    starts = started()
    notes.unlink()
    return [starts[number] - sent[number] for number in range(n)]


def durable_hop_latencies(worker: Worker, n: int, spacing: float) -> list[float]:
    """Seconds from a producer's committing statement to the first statement of the task
    it then sends (expecting no result), ``n`` times: a durable hop with no runtime."""
    from django.db import connection

    from .celery_app import DURABLE_HOPS

    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {DURABLE_HOPS} (id bigserial PRIMARY KEY, "
            "sent_at timestamptz NOT NULL, started_at timestamptz)"
        )
    rows = []
    for _ in range(n):
        time.sleep(spacing)
        with connection.cursor() as cursor:
            cursor.execute(f"INSERT INTO {DURABLE_HOPS} (sent_at) VALUES (now()) RETURNING id")
            row = cursor.fetchone()[0]
        worker.app.send_task("bench.ping_durable", args=[row], ignore_result=True)
        rows.append(row)

    def started() -> list[float]:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT extract(epoch FROM started_at - sent_at) FROM {DURABLE_HOPS} "
                "WHERE id = ANY(%s) AND started_at IS NOT NULL",
                [rows],
            )
            return [float(seconds) for (seconds,) in cursor.fetchall()]

    _wait("the durable pings to start", lambda: len(started()) == n)
    return started()


def steps_in_one_execution(n: int, workflow: str = "bench.steps") -> float:
    """Durable ``run`` steps per second in one execution (of ``workflow``, ``n`` steps
    whose results sum to ``sum(range(n))``), run in this process."""
    from yieldstar_django.runtime import get_execution, start_workflow
    from yieldstar_django.runtime.executions import run_execution

    with _yieldstar(WAKE_BACKEND="bench.runtime.drop_wakes"):
        execution_id = start_workflow(workflow, n)
        start = time.perf_counter()
        run_execution(execution_id)
        elapsed = time.perf_counter() - start
    assert get_execution(execution_id).result == sum(range(n))
    return n / elapsed


def commit_floor(n: int) -> float:
    """Commits per second of ``n`` raw psycopg ``INSERT``s of a heap-like row (unique on
    execution and step key, as the heap), each its own transaction: the least a durable
    step of one execution costs, one WAL flush per step."""
    from .connector import raw_connection

    execution = uuid.uuid4().hex
    with raw_connection() as conn:
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {STEP_FLOOR} (id bigserial PRIMARY KEY, "
            "execution_id text NOT NULL, step_key text NOT NULL, value_json text NOT NULL, "
            "recorded_at timestamptz NOT NULL, UNIQUE (execution_id, step_key))"
        )
        start = time.perf_counter()
        for i in range(n):
            conn.execute(
                f"INSERT INTO {STEP_FLOOR} (execution_id, step_key, value_json, recorded_at) "
                "VALUES (%s, %s, %s, now())",
                [execution, str(i), str(i)],
            )
        return n / (time.perf_counter() - start)


def steps_across_executions(executions: int, steps: int) -> float:
    """Durable steps per second over ``executions`` started at once, run by the worker."""
    from yieldstar_django.models import Execution
    from yieldstar_django.runtime import start_workflow

    start = time.perf_counter()
    ids = [start_workflow("bench.steps", steps) for _ in range(executions)]
    _wait(
        "executions to complete",
        lambda: Execution.objects.filter(pk__in=ids, status="completed").count() == executions,
    )
    return executions * steps / (time.perf_counter() - start)


#: What a burst copies: (table, the columns it rewrites, rows per execution).
BURST = [
    ("yieldstar_execution", {"id": "'burst-' || g"}, 1),
    ("yieldstar_execution_step",
     {"execution_id": "'burst-' || (g %% {n} + 1)", "step_key": "'burst-' || g"}, 5),
    ("yieldstar_wakeintent", {"execution_id": "'burst-' || (g %% {n} + 1)"}, 5),
]  # fmt: skip


def _burst(executions: int) -> None:
    """Insert ``executions`` finished executions, with five heap rows and five wake
    intents each (copies of the first rows of those tables), from a connection of its own
    in one transaction, and leave the statistics as they were (no ``ANALYZE``): a fan-out
    that started thousands of executions at once."""
    from tests.connections import second_connection

    conn = second_connection()
    try:
        with conn.transaction():
            for table, rewritten, per_execution in BURST:
                names = [
                    str(row[0])
                    for row in conn.execute(
                        "SELECT column_name FROM information_schema.columns"
                        " WHERE table_name = %s ORDER BY ordinal_position",
                        [table],
                    )
                    if row[0] != "id" or "id" in rewritten
                ]
                values = [rewritten.get(name, f"t.{name}").format(n=executions) for name in names]
                conn.execute(
                    f"INSERT INTO {table} ({', '.join(names)}) SELECT {', '.join(values)}"
                    f" FROM {table} t, generate_series(1, %s) AS g"
                    f" WHERE t.id = (SELECT min(id) FROM {table})",
                    [executions * per_execution],
                )
    finally:
        conn.close()


def _resume_times(tag: str, n: int) -> list[float]:
    """Seconds of ``run_execution`` of ``n`` executions woken for a take, in this process
    (on its long-lived connection)."""
    from yieldstar_django import get_store_client
    from yieldstar_django.runtime import start_workflow
    from yieldstar_django.runtime.executions import run_execution

    from .workflows import inbox

    client = get_store_client()
    ids = {start_workflow("bench.wait_take", f"{tag}-{k}"): f"{tag}-{k}" for k in range(n)}
    for execution_id in ids:
        run_execution(execution_id)
    seconds = []
    for execution_id, store_id in ids.items():
        client.update_store(inbox, store_id, updater=lambda d: d["items"].append(1))
        started = time.perf_counter()
        outcome = run_execution(execution_id)
        seconds.append(time.perf_counter() - started)
        assert str(outcome) == "finished", outcome
    return seconds


def burst_resumes(executions: int, n: int) -> tuple[float, float, float]:
    """Median seconds of a woken take's resume on a connection whose plans were made on
    small runtime tables: before a burst of ``executions``; after it, no ``ANALYZE``; and
    after the relay's upkeep (:func:`yieldstar_django.analyze.analyze_grown_tables`). The
    runtime tables are emptied before and after."""
    from django.db import connection

    from yieldstar_django.analyze import analyze_grown_tables

    def empty() -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                "TRUNCATE yieldstar_execution, yieldstar_wakeintent, yieldstar_appliedstep,"
                " yieldstar_waiter CASCADE"
            )
            cursor.execute("ANALYZE")

    with _yieldstar(WAKE_BACKEND="bench.runtime.drop_wakes"):
        empty()
        connection.close()  # a new connection: every plan it prepares sees small tables
        _resume_times("burst-warm", 10)
        before = statistics.median(_resume_times("burst-before", n))
        _burst(executions)
        cold = statistics.median(_resume_times("burst-cold", n))
        grown = analyze_grown_tables(connection.alias)
        assert "yieldstar_execution_step" in grown, grown
        after = statistics.median(_resume_times("burst-after", n))
        empty()
    return before, cold, after


# -- DBOS -----------------------------------------------------------------------------------


class Dbos:
    """DBOS on its own system database of the same PostgreSQL server, in this process."""

    def __init__(self) -> None:
        DBOS = configure_dbos("yieldstar-bench")

        @DBOS.step()
        def noop(i: int) -> int:
            return i

        @DBOS.workflow()
        def steps(n: int) -> int:
            total = 0
            for i in range(n):
                total += noop(i)
            return total

        @DBOS.workflow()
        def wait_message() -> float:
            DBOS.recv("go", timeout_seconds=120)
            return time.time()

        self.DBOS, self.steps, self.wait_message = DBOS, steps, wait_message
        DBOS.launch()

    def steps_in_one_workflow(self, n: int) -> float:
        start = time.perf_counter()
        assert self.steps(n) == sum(range(n))
        return n / (time.perf_counter() - start)

    def steps_across_workflows(self, workflows: int, steps: int) -> float:
        start = time.perf_counter()
        handles = [self.DBOS.start_workflow(self.steps, steps) for _ in range(workflows)]
        for handle in handles:
            handle.get_result()
        return workflows * steps / (time.perf_counter() - start)

    def notify_latencies(self, n: int, spacing: float) -> list[float]:
        handles = [self.DBOS.start_workflow(self.wait_message) for _ in range(n)]
        time.sleep(1.0)  # every workflow is inside recv
        sent: list[float] = []
        for handle in handles:
            time.sleep(spacing)
            sent.append(time.time())
            self.DBOS.send(handle.workflow_id, "go", "go")
        return [handle.get_result() - at for handle, at in zip(handles, sent, strict=True)]

    def close(self) -> None:
        self.DBOS.destroy()


# -- the suite ------------------------------------------------------------------------------


def _latency_rows(
    ours: list[float],
    name: str,
    baseline: list[float],
    baseline_name: str,
    note: Callable[[str, float], str],
    target: str = "",
) -> list[Row]:
    """Rows of p50 and p99 of latency samples (seconds) against a baseline's; ``name`` and
    ``baseline_name`` take the quantile's label, ``target`` applies to p50."""
    return [
        Row(
            SUITE,
            name.format(label),
            _ms(_quantile(ours, q)),
            baseline_name.format(label),
            _ms(_quantile(baseline, q)),
            "ms",
            target=target if label == "p50" else "",
            note=note(label, q),
        )
        for label, q in (("p50", 0.5), ("p99", 0.99))
    ]


def _ms(seconds: float) -> float:
    return seconds * 1e3


def run(quick: bool = False) -> list[Row]:
    """Rounds interleave ours and the baselines, so a noisy machine slows both alike;
    throughputs are the median of the rounds, latencies pooled over them. Wake latencies
    are measured before DBOS starts (its threads would share the sending process)."""
    _setup_django()
    rounds = 3 if quick else 5
    samples = 15 if quick else 40  # wakes per round
    spacing = 0.03
    one_steps = 300 if quick else 1000
    many, each = (40, 5) if quick else (100, 10)
    takers_sweep = (1, 4, 8) if quick else (1, 20, 100, 1000)
    at_once_sweep = (1, 20, 100) if quick else (1, 20, 100, 1000)
    resumes: dict[int, tuple[float, float]] = {}
    herd: dict[int, tuple[float, float]] = {}
    broker = os.environ.get("BENCH_BROKER_URL", DEFAULT_BROKER)
    ours: list[float] = []
    ours_call: list[float] = []
    celery: list[float] = []
    celery_unawaited: list[float] = []
    durable_hop: list[float] = []
    notify: list[float] = []
    ours_one: list[float] = []
    floor_one: list[float] = []
    ours_many: list[float] = []
    dbos_one: list[float] = []
    dbos_many: list[float] = []
    with _yieldstar():
        worker = Worker(broker)
        try:
            # Latencies first, before DBOS starts its threads in this (the sending) process.
            celery_latencies(worker, 20, 0.01)  # warm up every path
            celery_latencies_without_result(worker, 10, 0.01)
            durable_hop_latencies(worker, 10, 0.01)
            wake_latencies(10, 0.01)
            for _ in range(rounds):
                commit, call = wake_latencies(samples, spacing)
                ours += commit
                ours_call += call
                celery += celery_latencies(worker, samples, spacing)
                celery_unawaited += celery_latencies_without_result(worker, samples, spacing)
                durable_hop += durable_hop_latencies(worker, samples, spacing)
            for takers in takers_sweep:
                resumes[takers] = drain_queue(takers)
            for takers in at_once_sweep:
                herd[takers] = drain_queue(takers, timeout=900, at_once=True)
            dbos, unavailable = start_dbos(Dbos)
            try:
                if dbos is not None:
                    dbos.notify_latencies(10, 0.01)  # warm up
                for _ in range(rounds):
                    ours_many.append(steps_across_executions(many, each))
                    ours_one.append(steps_in_one_execution(one_steps))
                    floor_one.append(commit_floor(one_steps))
                    if dbos is not None:
                        notify += dbos.notify_latencies(samples, spacing)
                        dbos_many.append(dbos.steps_across_workflows(many, each))
                        dbos_one.append(dbos.steps_in_one_workflow(one_steps))
            finally:
                if dbos is not None:
                    dbos.close()
        finally:
            worker.stop()
        burst = burst_resumes(*((5_000, 10) if quick else (20_000, 30)))

    broker_kind = broker.split(":", 1)[0]
    total = rounds * samples
    latency_series = [
        Series("wake-latency", "yieldstar: commit -> take recorded", [_ms(x) for x in ours]),
        Series("wake-latency", "yieldstar: update_store call -> take recorded",
               [_ms(x) for x in ours_call]),
        Series("wake-latency", "Celery: send_task -> task starts", [_ms(x) for x in celery]),
        Series("wake-latency", "Celery, no result: send_task -> starts",
               [_ms(x) for x in celery_unawaited]),
        Series("wake-latency", "durable hop: a commit -> its task's first statement",
               [_ms(x) for x in durable_hop]),
        Series("wake-latency", "DBOS: send -> recv returns", [_ms(x) for x in notify])
        if dbos is not None
        else Series("wake-latency", f"DBOS: not measured ({unavailable[:50]})", []),
    ]  # fmt: skip
    rows = _latency_rows(
        ours,
        "wake latency {}: store commit -> take recorded",
        celery,
        "Celery enqueue->start {}",
        lambda label, q: (
            f"{total} wakes, {broker_kind}, worker -c {WORKER_CONCURRENCY}; from "
            f"the update_store call: {_ms(_quantile(ours_call, q)):.1f} ms"
        ),
        target="p50 <= 2x",
    )
    rows[0].series = latency_series
    rows += _latency_rows(
        ours,
        "wake latency {}: store commit -> take recorded",
        celery_unawaited,
        "Celery enqueue->start {}, no result awaited",
        lambda label, q: "the same wakes; Celery's task sent with ignore_result, as wakes are",
    )
    rows += _latency_rows(
        ours,
        "wake latency {}: store commit -> take recorded",
        durable_hop,
        "durable hop {}: a commit -> its task's first statement",
        lambda label, q: (
            "the producer commits a row, then sends a task (no result) that updates it; "
            "what ours adds: the lease, the replay, the take and its commit call"
        ),
    )
    most, fewest = max(takers_sweep), min(takers_sweep)
    rows.append(
        Row(
            SUITE,
            f"resumes per item, {most} takers on one queue",
            resumes[most][0],
            f"{fewest} taker",
            resumes[fewest][0],
            "resumes/item",
            target="<= 2",
            note=f"items pushed one at a time; store wakes per item: {resumes[most][1]:.2f}; "
            + "; ".join(f"{n} takers: {resumes[n][0]:.2f}" for n in takers_sweep)
            + f"; worker -c {WORKER_CONCURRENCY}",
            series=[
                Series(
                    "takers",
                    "resumes per item, items one at a time (execution runs)",
                    [float(n) for n in takers_sweep],
                    [resumes[n][0] for n in takers_sweep],
                ),
                Series(
                    "takers",
                    "store wakes per item, items one at a time (intents)",
                    [float(n) for n in takers_sweep],
                    [resumes[n][1] for n in takers_sweep],
                ),
                Series(
                    "takers",
                    "resumes per item, N items in one commit to N takers",
                    [float(n) for n in at_once_sweep],
                    [herd[n][0] for n in at_once_sweep],
                ),
            ],
        )
    )
    most = max(at_once_sweep)
    rows.append(
        Row(
            SUITE,
            f"resumes per item, {most} items in one commit to {most} takers",
            herd[most][0],
            "1 item to 1 taker",
            herd[1][0],
            "resumes/item",
            target="<= 2x",
            note="; ".join(f"N={n}: {herd[n][0]:.2f} resumes, {herd[n][1]:.2f} wakes per item"
                           for n in at_once_sweep if n > 1) + "; no wake lost (all took one)",
        )
    )  # fmt: skip
    steps = [
        ("one execution", ours_one, "DBOS steps/s, one workflow", dbos_one, ">= 6x",
         f"{one_steps} step.run in one execution, in-process, both; {rounds} rounds"),
        ("many executions", ours_many, "DBOS start_workflow (threads)", dbos_many, ">= 3x",
         f"{many} executions x {each} steps; ours on the Celery worker; {rounds} rounds"),
    ]  # fmt: skip
    floor = statistics.median(floor_one)
    versus_dbos = (
        f"; the floor is {floor / statistics.median(dbos_one):.2f}x DBOS" if dbos_one else ""
    )
    floor_row = Row(
        SUITE,
        "durable steps/s, one execution",
        statistics.median(ours_one),
        "commit floor: raw psycopg INSERT, one commit per step",
        floor,
        "steps/s",
        note="one WAL flush per step bounds both sides" + versus_dbos,
    )
    step_rows = (
        [
            Row(SUITE, f"durable steps/s, {name}", statistics.median(values), unavailable, 0,
                "steps/s")
            for name, values, *_ in steps
        ]
        if dbos is None
        else [
            Row(SUITE, f"durable steps/s, {name}", statistics.median(values), baseline_name,
                statistics.median(baseline), "steps/s", target=target, note=note)
            for name, values, baseline_name, baseline, target, note in steps
        ]
    )  # fmt: skip
    step_rows.insert(1, floor_row)  # after the one-execution row
    rows += step_rows
    before, cold, after = burst
    rows.append(
        Row(SUITE, "resume after a burst of executions, upkeep ran", after * 1e3,
            "resume before the burst", before * 1e3, "ms",
            note=f"{'5,000' if quick else '20,000'} executions, 5 heap rows and 5 intents each, "
            "no ANALYZE; plans made on small tables; the relay's upkeep analyzed the tables that "
            f"grew; before it: {cold * 1e3:.1f} ms ({cold / before:.1f}x)")
    )  # fmt: skip
    if dbos is None:
        return rows
    rows += _latency_rows(
        ours,
        "notify->resume {} (store commit -> take recorded)",
        notify,
        "DBOS send->recv {}",
        lambda label, q: (
            "ours crosses the broker to a worker process; DBOS is in-process"
            if label == "p50"
            else ""
        ),
    )
    return rows
