"""Connector: the database store client against raw SQL, on one PostgreSQL database.

Every figure is a ratio against a baseline measured in the same run on the same database,
rounds of the two interleaved so that a noisy machine slows both alike:

- ``update_store`` throughput against a raw psycopg compare-and-swap loop (``SELECT`` the
  row, decode, change, encode, ``UPDATE ... WHERE id = %s AND version = %s``, autocommit);
- the same with a step id, against the raw loop that also inserts a ledger row in the
  transaction of its ``UPDATE``;
- ``take_from_store`` (pop the head of a 500-item queue) against the same pop done raw;
- 8 processes incrementing one store against one process alone (attempts per commit
  from ``DatabaseStoreClient.commit_attempts``);
- the cost of a mutation with 1,000 and 100,000 waiters on the store (one of which it
  wakes) against the same mutation with none.

The database is ``BENCH_DATABASE_URL`` (default
``postgres://postgres@127.0.0.1:5432/yieldstar_bench``), created and migrated if needed;
the settings are ``bench.worker_settings``, shared with the runtime suite.
Wakes go to a backend that drops them: the figures are the store's, not a broker's.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from .table import Row

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/yieldstar_bench"
SUITE = "connector"


def drop_wakes(wakes: Any) -> None:
    """The ``WAKE_BACKEND`` of the benchmark."""


#: The settings of the connector figures: wakes dropped, default history.
YIELDSTAR = {"WAKE_BACKEND": f"{__name__}.drop_wakes"}
#: Under contention, no operation may give up: attempts are counted, not capped.
CONTENTION = {"CAS_MAX_ATTEMPTS": 100_000}


def setup_django() -> None:
    """Set Django up on the benchmark database (creating it), as the other suites do."""
    os.environ.setdefault("BENCH_DATABASE_URL", DEFAULT_URL)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.worker_settings")
    import django
    from django.apps import apps

    if apps.ready:
        return
    _create_database(os.environ["BENCH_DATABASE_URL"])
    django.setup()


def _create_database(url: str) -> None:
    import psycopg
    from psycopg import sql

    from demo_project.dburl import parse_database_url

    entry = parse_database_url(url)
    params = {
        "user": entry["USER"] or None,
        "password": entry["PASSWORD"] or None,
        "host": entry["HOST"] or None,
        "port": entry["PORT"] or None,
    }
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [entry["NAME"]]
        ).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(entry["NAME"])))


def migrate() -> None:
    from django.core.management import call_command

    call_command("migrate", "yieldstar", verbosity=0)


def raw_connection() -> Any:
    """A psycopg connection of its own, outside Django, in autocommit mode, with the
    prepared-statement setting of Django's (``OPTIONS["prepare_threshold"]``, off by
    default), so both sides speak the same protocol."""
    import psycopg
    from django.db import connection

    s = connection.settings_dict
    conn = psycopg.connect(
        dbname=s["NAME"],
        user=s["USER"] or None,
        password=s["PASSWORD"] or None,
        host=s["HOST"] or None,
        port=s["PORT"] or None,
        autocommit=True,
    )
    conn.prepare_threshold = s.get("OPTIONS", {}).get("prepare_threshold")
    return conn


def reset() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE yieldstar_storeinstance, yieldstar_storeversion, yieldstar_appliedstep, "
            "yieldstar_waiter, yieldstar_waiterpath, yieldstar_wakeintent"
        )
        cursor.execute(
            "CREATE TABLE IF NOT EXISTS bench_raw "
            "(id bigint PRIMARY KEY, version bigint NOT NULL, state text NOT NULL)"
        )
        cursor.execute(
            "CREATE TABLE IF NOT EXISTS bench_raw_ledger (step text PRIMARY KEY, result text)"
        )
        cursor.execute("TRUNCATE bench_raw, bench_raw_ledger")
        cursor.execute("VACUUM ANALYZE")


def _dumps(value: Any) -> str:
    import json

    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# --- baselines: the same work done with raw psycopg -------------------------------------


class RawStore:
    """One row of ``bench_raw`` changed by a raw compare-and-swap loop."""

    def __init__(self, conn: Any, row_id: int, state: Any) -> None:
        self.conn = conn
        self.id = row_id
        conn.execute(
            "INSERT INTO bench_raw (id, version, state) VALUES (%s, 0, %s)",
            [row_id, _dumps(state)],
        )
        self.steps = 0

    def update(self, change: Callable[[Any], Any], *, ledger: bool = False) -> Any:
        import json

        while True:
            version, text = self.conn.execute(
                "SELECT version, state FROM bench_raw WHERE id = %s", [self.id]
            ).fetchone()
            state = json.loads(text)
            result = change(state)
            encoded = _dumps(state)
            if ledger:
                self.steps += 1
                with self.conn.transaction():
                    updated = self.conn.execute(
                        "UPDATE bench_raw SET state = %s, version = version + 1 "
                        "WHERE id = %s AND version = %s",
                        [encoded, self.id, version],
                    ).rowcount
                    if updated:
                        self.conn.execute(
                            "INSERT INTO bench_raw_ledger (step, result) VALUES (%s, %s)",
                            [f"s{self.steps}", encoded],
                        )
            else:
                updated = self.conn.execute(
                    "UPDATE bench_raw SET state = %s, version = version + 1 "
                    "WHERE id = %s AND version = %s",
                    [encoded, self.id, version],
                ).rowcount
            if updated:
                return result


# --- measurement helpers ----------------------------------------------------------------


def interleaved(
    ours: Callable[[], None], baseline: Callable[[], None], *, ops: int, rounds: int
) -> tuple[float, float]:
    """Median operations per second of ``ours`` and ``baseline``, ``ops`` calls per round,
    many short rounds alternating between the two, so that a burst of load from elsewhere
    on the machine lands on both alike and the medians leave it out."""
    ours_rates: list[float] = []
    base_rates: list[float] = []
    for _ in range(rounds):
        for fn, rates in ((baseline, base_rates), (ours, ours_rates)):
            start = time.perf_counter()
            for _ in range(ops):
                fn()
            rates.append(ops / (time.perf_counter() - start))
    return statistics.median(ours_rates), statistics.median(base_rates)


def _definition(name: str, initial: Callable[[str], Any]) -> Any:
    from yieldstar_django.core.definition import StoreDefinition

    return StoreDefinition(name, None, initial)


def _counter_state(id: str) -> Any:
    return {"n": 0, "label": "bench", "tags": ["a", "b", "c"]}


def _increment(state: Any) -> None:
    state["n"] += 1


# --- the figures ------------------------------------------------------------------------


def measure_updates(ops: int, rounds: int) -> list[Row]:
    from yieldstar_django.connector import DatabaseStoreClient
    from yieldstar_django.core.results import StoreStepId

    reset()
    raw = raw_connection()
    client = DatabaseStoreClient()
    counter = _definition("bench-counter", _counter_state)
    client.get_store(counter, "c")
    raw_store = RawStore(raw, 1, _counter_state("c"))

    ours, base = interleaved(
        lambda: client.update_store(counter, "c", updater=_increment),
        lambda: raw_store.update(_increment),
        ops=ops,
        rounds=rounds,
    )
    rows = [
        Row(
            SUITE,
            "update_store throughput",
            ours,
            "raw SELECT + UPDATE ... WHERE version",
            base,
            "ops/s",
            ">= 0.5x",
            "one process, no waiters",
        )
    ]

    steps = iter(range(10**9))
    stepped = _definition("bench-stepped", _counter_state)
    client.get_store(stepped, "c")
    raw_stepped = RawStore(raw, 2, _counter_state("c"))
    ours, base = interleaved(
        lambda: client.update_store(
            stepped, "c", updater=_increment, step_id=StoreStepId("bench", f"s{next(steps)}")
        ),
        lambda: raw_stepped.update(_increment, ledger=True),
        ops=ops,
        rounds=rounds,
    )
    rows.append(
        Row(
            SUITE,
            "update_store with a step id",
            ours,
            "raw loop + ledger INSERT in one transaction",
            base,
            "ops/s",
            ">= 0.5x",
            "ledger lookup + read + commit",
        )
    )

    def queue_state(id: str) -> Any:
        return {"items": [{"id": i, "payload": "x" * 20} for i in range(500)]}

    def head(state: Any) -> Any:
        return state["items"][0] if state["items"] else None

    def pop(draft: Any, selected: Any) -> None:
        draft["items"].pop(0)

    def raw_pop(state: Any) -> Any:
        return state["items"].pop(0)

    take_ops = max(1, 400 // rounds)
    queue = _definition("bench-queue", queue_state)
    client.get_store(queue, "q")
    raw_queue = RawStore(raw, 3, queue_state("q"))
    ours, base = interleaved(
        lambda: client.take_from_store(queue, "q", selector=head, claim=pop),
        lambda: raw_queue.update(raw_pop),
        ops=take_ops,
        rounds=rounds,
    )
    rows.append(
        Row(
            SUITE,
            "take_from_store throughput",
            ours,
            "raw pop with the same CAS loop",
            base,
            "ops/s",
            ">= 0.5x",
            "head of a 500-item queue",
        )
    )
    raw.close()
    return rows


def _contend(name: str, seconds: float, start: Any, results: Any) -> None:
    """Process target: increment one store for ``seconds`` after ``start``; report the
    commits, the commit attempts and the most attempts one increment took."""
    setup_django()
    from django.db import connections
    from django.test.utils import override_settings

    from yieldstar_django.connector import DatabaseStoreClient

    override_settings(YIELDSTAR={**YIELDSTAR, **CONTENTION}).enable()
    client = DatabaseStoreClient()
    counter = _definition(name, _counter_state)
    client.get_store(counter, "c")
    client.commit_attempts = 0
    start.wait()
    deadline = time.perf_counter() + seconds
    commits = most = 0
    while time.perf_counter() < deadline:
        before = client.commit_attempts
        client.update_store(counter, "c", updater=_increment)
        commits += 1
        most = max(most, client.commit_attempts - before)
    results.put((commits, client.commit_attempts, most))
    connections.close_all()


def _run_processes(name: str, processes: int, seconds: float) -> tuple[float, float, int]:
    """Commits per second of ``processes`` processes incrementing one store for
    ``seconds``, commit attempts per commit, and the most attempts one increment took."""
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(processes)
    results = ctx.Queue()
    workers = [
        ctx.Process(target=_contend, args=(name, seconds, start, results))
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=600) for _ in workers]
    for worker in workers:
        worker.join()
    commits = sum(o[0] for o in outcomes)
    attempts = sum(o[1] for o in outcomes)
    return commits / seconds, attempts / commits, max(o[2] for o in outcomes)


def measure_contention(seconds: float, rounds: int) -> list[Row]:
    """Rounds alternate one process alone and eight together, each on a store of its own."""
    reset()
    alone: list[float] = []
    contended: list[float] = []
    attempts: list[float] = []
    worst = 0
    for r in range(rounds):
        rate, _, _ = _run_processes(f"bench-alone-{r}", 1, seconds)
        alone.append(rate)
        rate, per_commit, most = _run_processes(f"bench-contended-{r}", 8, seconds)
        contended.append(rate)
        attempts.append(per_commit)
        worst = max(worst, most)
    return [
        Row(
            SUITE,
            "8 processes on one store",
            statistics.median(contended),
            "1 process alone",
            statistics.median(alone),
            "commits/s",
            ">= 0.5x",
            f"{statistics.median(attempts):.2f} commit attempts per commit (at most {worst})",
        )
    ]


def add_waiters(store_pk: int, instance_id: str, count: int) -> None:
    """Waiter ``e<i>`` reads ``("jobs", i, "status")``, indexed as ``register_waiter``
    indexes it, written in bulk."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO yieldstar_waiter (workflow_id, execution_id, step_key, store_pk, "
            "instance_id, since_version, read_paths, created_at) "
            "SELECT 'wf', 'e' || i, 'take', %s, %s, 0, "
            "'[[\"jobs\",' || i || ',\"status\"]]', now() FROM generate_series(0, %s) i",
            [store_pk, instance_id, count - 1],
        )
        for kind, path in [
            (0, "'[\"jobs\",' || substr(execution_id, 2) || ',\"status\"]'"),
            (1, "'[\"jobs\",' || substr(execution_id, 2) || ']'"),
            (1, "'[\"jobs\"]'"),
        ]:
            cursor.execute(
                "INSERT INTO yieldstar_waiterpath (waiter_id, store_pk, kind, path) "
                f"SELECT id, store_pk, {kind}, {path} FROM yieldstar_waiter WHERE store_pk = %s",
                [store_pk],
            )
        cursor.execute("ANALYZE yieldstar_waiter, yieldstar_waiterpath")


def measure_waiters(ops: int, rounds: int) -> list[Row]:
    from django.db import connection

    from yieldstar_django.connector import DatabaseStoreClient

    reset()
    client = DatabaseStoreClient()

    def jobs_state(id: str) -> Any:
        return {"jobs": [{"status": "new"} for _ in range(10)], "other": 0}

    def touch(state: Any) -> None:
        state["jobs"][5]["status"] = "new" if state["jobs"][5]["status"] == "done" else "done"

    stores: dict[int, Any] = {}
    for count in (0, 1_000, 100_000):
        definition = _definition(f"bench-waiters-{count}", jobs_state)
        snapshot = client.get_store(definition, "q")
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id FROM yieldstar_storeinstance WHERE name = %s", [definition.name]
            )
            (store_pk,) = cursor.fetchone()
        if count:
            add_waiters(store_pk, snapshot.instance_id, count)
        stores[count] = definition
    rates: dict[int, list[float]] = {count: [] for count in stores}
    for _ in range(rounds):
        for count, definition in stores.items():
            started = time.perf_counter()
            for _ in range(ops):
                client.update_store(definition, "q", updater=touch)
            rates[count].append((time.perf_counter() - started) / ops)
    cost = {count: statistics.median(values) * 1e3 for count, values in rates.items()}
    return [
        Row(
            SUITE,
            f"mutation cost, {count:,} waiters",
            cost[count],
            "no waiters",
            cost[0],
            "ms",
            "<= 1.5x" if count == 100_000 else "",
            "wakes 1 waiter (an intent, delivered on commit)",
        )
        for count in (1_000, 100_000)
    ]


def run(quick: bool = False) -> list[Row]:
    setup_django()
    from django.test.utils import override_settings

    migrate()
    with override_settings(YIELDSTAR=YIELDSTAR):
        rows = measure_updates(*((40, 7) if quick else (60, 25)))
        rows += measure_contention(*((2.0, 2) if quick else (4.0, 5)))
        rows += measure_waiters(*((40, 5) if quick else (60, 15)))
    return rows
