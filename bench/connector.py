"""Connector: the database store client against raw SQL, on one PostgreSQL database.

Every figure is a ratio against a baseline measured in the same run on the same database,
rounds of the two interleaved so that a noisy machine slows both alike:

- ``update_store`` throughput (one round trip: the client commits from the row it
  remembers) against the physical floor, a raw psycopg ``UPDATE ... WHERE id = %s AND
  version = %s`` of the row the raw loop last saw (autocommit); and the read-first path
  (``SNAPSHOT_CACHE_SIZE = 0``, two round trips) against the raw ``SELECT`` + ``UPDATE``;
- the same with a step id, against the raw loop that also inserts a ledger row in the
  transaction of its ``UPDATE``;
- ``take_from_store`` (pop the head of a 500-item queue) against the same pop done raw;
- 8 processes incrementing one store against one process alone (attempts per commit
  from ``DatabaseStoreClient.commit_attempts``), with 2 and 4 processes measured in the
  same rounds for the plot of commits/s against processes, and the fairness of the 8: the
  commits of the process that made fewest over those of the one that made most; and the
  same sweep of the raw loop of the ``update_store`` floor, backing off as the client does
  by default, on a row of its own, 8 processes against 1 (what the machine and PostgreSQL
  allow a hand-rolled compare-and-swap on one row);
- the cost of a mutation with 1,000 and 100,000 waiters on the store (one of which it
  wakes, or none) against the same mutation with none, and waking one against waking none:
  a change of a field no waiter read, and the same change with its waiter already woken
  (like for like: only the wake differs). Before each commit that wakes, untimed, the
  waiter it wakes is registered again (a waiter is woken once per registration), and the
  suite fails unless exactly those commits wrote intents;
- the same with 20,000 and 100,000 waiters registered in a burst from another connection
  on a fresh database, without ``ANALYZE``, measured on a connection whose plans were
  cached while the waiter tables were empty (both commit paths), against a commit with no
  waiter in the database on that connection;
- ``update_store`` on SQLite against the raw loop with Python's ``sqlite3``.

The database is ``BENCH_DATABASE_URL`` (default
``postgres://postgres@127.0.0.1:5432/yieldstar_bench``), created and migrated if needed;
the settings are ``bench.worker_settings``, shared with the runtime suite. The SQLite
figure uses files in ``BENCH_SQLITE_DIR`` (default ``var/``).
Wakes go to a backend that drops them: the figures are the store's, not a broker's.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any, NamedTuple

from .databases import create_database
from .table import Row, Series
from .waiter_rows import insert_waiters

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/yieldstar_bench"
SUITE = "connector"


def drop_wakes(wakes: Any) -> None:
    """The ``WAKE_BACKEND`` of the benchmark."""


#: The settings of the connector figures: wakes dropped, default history.
YIELDSTAR = {"WAKE_BACKEND": f"{__name__}.drop_wakes"}
#: Under contention, no operation may give up: attempts are counted, not capped.
CONTENTION = {"CAS_MAX_ATTEMPTS": 100_000}
DEFAULT_CAS_MAX_ATTEMPTS = 50


def setup_django() -> None:
    """Set Django up on the benchmark database (creating it), as the other suites do."""
    os.environ.setdefault("BENCH_DATABASE_URL", DEFAULT_URL)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.worker_settings")
    import django
    from django.apps import apps

    if apps.ready:
        return
    create_database(os.environ["BENCH_DATABASE_URL"])
    django.setup()


def migrate() -> None:
    from django.core.management import call_command

    call_command("migrate", "yieldstar", verbosity=0)


def raw_connection() -> Any:
    """A psycopg connection of its own, outside Django, in autocommit mode, with the
    prepared-statement setting of Django's (``OPTIONS["prepare_threshold"]``, off by
    default), so both sides speak the same protocol."""
    from django.db import connection

    from tests.connections import second_connection

    conn = second_connection()
    conn.prepare_threshold = connection.settings_dict.get("OPTIONS", {}).get("prepare_threshold")
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

    def __init__(self, conn: Any, row_id: int, state: Any = None) -> None:
        """Insert row ``row_id`` with ``state``; ``None``: use the row as it is."""
        self.conn = conn
        self.id = row_id
        if state is not None:
            conn.execute(
                "INSERT INTO bench_raw (id, version, state) VALUES (%s, 0, %s)",
                [row_id, _dumps(state)],
            )
        self.steps = 0
        self._known: tuple[int, Any] | None = None  # the row ``update_known`` last saw
        self._lost = 0  # races lost in a row by ``update_known``

    def _read(self) -> tuple[int, Any]:
        """The row's version and decoded state."""
        import json

        version, text = self.conn.execute(
            "SELECT version, state FROM bench_raw WHERE id = %s", [self.id]
        ).fetchone()
        return version, json.loads(text)

    def _write(self, encoded: str, version: int) -> bool:
        """``UPDATE ... WHERE version``: whether the row was still at ``version``."""
        return bool(
            self.conn.execute(
                "UPDATE bench_raw SET state = %s, version = version + 1 "
                "WHERE id = %s AND version = %s",
                [encoded, self.id, version],
            ).rowcount
        )

    def update(self, change: Callable[[Any], Any], *, ledger: bool = False) -> Any:
        while True:
            version, state = self._read()
            result = change(state)
            encoded = _dumps(state)
            if ledger:
                self.steps += 1
            with self.conn.transaction() if ledger else nullcontext():
                updated = self._write(encoded, version)
                if updated and ledger:
                    self.conn.execute(
                        "INSERT INTO bench_raw_ledger (step, result) VALUES (%s, %s)",
                        [f"s{self.steps}", encoded],
                    )
            if updated:
                return result

    def update_known(self, change: Callable[[Any], Any], backoff: Any = None) -> Any:
        """The physical floor of a compare-and-swap: change the last row this loop saw and
        ``UPDATE ... WHERE version`` in one round trip, reading only after a lost race (at
        once, or after ``backoff.delay(lost races)`` seconds with a ``RetryPolicy``)."""
        if self._known is None:
            self._known = self._read()
        while True:
            version, state = self._known
            result = change(state)
            if self._write(_dumps(state), version):
                self._known = (version + 1, state)
                self._lost = 0
                return result
            if backoff is not None:
                self._lost += 1
                time.sleep(backoff.delay(self._lost))
            self._known = self._read()


# --- measurement helpers ----------------------------------------------------------------


def interleaved(
    ours: Callable[[], object], baseline: Callable[[], object], *, ops: int, rounds: int
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

    class ReadFirst(DatabaseStoreClient):
        def snapshot_capacity(self) -> int:
            return 0

    read_first = ReadFirst()
    read_first.get_store(counter, "c")

    steps = iter(range(10**9))
    stepped = _definition("bench-stepped", _counter_state)
    client.get_store(stepped, "c")
    raw_stepped = RawStore(raw, 2, _counter_state("c"))

    def queue_state(id: str) -> Any:
        return {"items": [{"id": i, "payload": "x" * 20} for i in range(500)]}

    def head(state: Any) -> Any:
        return state["items"][0] if state["items"] else None

    def pop(draft: Any, selected: Any) -> None:
        draft["items"].pop(0)

    def raw_pop(state: Any) -> Any:
        return state["items"].pop(0)

    queue = _definition("bench-queue", queue_state)
    client.get_store(queue, "q")
    raw_queue = RawStore(raw, 3, queue_state("q"))

    # (figure, ours, baseline, its operation, target, note, calls per round): ops/s each,
    # in interleaved rounds; the queue's rounds are shorter (it holds 500 items).
    cases: list[tuple[str, Callable[[], Any], str, Callable[[], Any], str, str, int]] = [
        ("update_store throughput",
         lambda: client.update_store(counter, "c", updater=_increment),
         "raw UPDATE ... WHERE version of a known row",
         lambda: raw_store.update_known(_increment),
         ">= 0.5x", "one round trip: commits from the row it remembers", ops),
        ("update_store, reading first",
         lambda: read_first.update_store(counter, "c", updater=_increment),
         "raw SELECT + UPDATE ... WHERE version", lambda: raw_store.update(_increment),
         "comparison", "two round trips (SNAPSHOT_CACHE_SIZE = 0)", ops),
        ("update_store with a step id",
         lambda: client.update_store(
             stepped, "c", updater=_increment, step_id=StoreStepId("bench", f"s{next(steps)}")),
         "raw loop + ledger INSERT in one transaction",
         lambda: raw_stepped.update(_increment, ledger=True),
         ">= 0.5x", "ledger lookup + read + commit", ops),
        ("take_from_store throughput",
         lambda: client.take_from_store(queue, "q", selector=head, claim=pop),
         "raw pop with the same CAS loop", lambda: raw_queue.update(raw_pop),
         ">= 0.5x", "head of a 500-item queue", max(1, 400 // rounds)),
    ]  # fmt: skip
    rows = []
    for figure, ours, baseline, base, target, note, calls in cases:
        ours_rate, base_rate = interleaved(ours, base, ops=calls, rounds=rounds)
        rows.append(Row(SUITE, figure, ours_rate, baseline, base_rate, "ops/s", target, note))
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
    commits = most = over_cap = 0
    while time.perf_counter() < deadline:
        before = client.commit_attempts
        client.update_store(counter, "c", updater=_increment)
        commits += 1
        took = client.commit_attempts - before
        most = max(most, took)
        over_cap += took > DEFAULT_CAS_MAX_ATTEMPTS
    results.put((commits, client.commit_attempts, most, over_cap))
    connections.close_all()


def _contend_raw(row_id: int, seconds: float, start: Any, results: Any) -> None:
    """Process target: the raw baseline of ``_contend``, the physical floor's loop
    (``RawStore.update_known``) incrementing ``bench_raw`` row ``row_id``, backing off
    after a lost race as the client does by default (``RetryPolicy()``)."""
    from yieldstar_django.core.commits import RetryPolicy

    setup_django()
    raw = raw_connection()
    store = RawStore(raw, row_id)
    policy = RetryPolicy()
    store.update_known(_increment, policy)  # reads the row, as the client's first read does
    start.wait()
    deadline = time.perf_counter() + seconds
    commits = 0
    while time.perf_counter() < deadline:
        store.update_known(_increment, policy)
        commits += 1
    results.put((commits, 0, 0, 0))
    raw.close()


class Contention(NamedTuple):
    """What ``processes`` processes made in one run of :func:`_run_processes`."""

    rate: float  # commits per second, all processes together
    attempts: float  # commit attempts per commit (0 for the raw loop, which does not count)
    most: int  # the most attempts one increment took
    over_cap: float  # the fraction of increments over the default CAS_MAX_ATTEMPTS
    fairness: float  # the slowest process's commits over the fastest's


def _run_processes(
    target: Callable[[Any, float, Any, Any], None], key: Any, processes: int, seconds: float
) -> Contention:
    """Run ``processes`` processes of ``target(key, seconds, start, results)``
    (``_contend`` on store ``key``, or ``_contend_raw`` on row ``key``) for ``seconds``."""
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(processes)
    results = ctx.Queue()
    args = (key, seconds, start, results)
    workers = [ctx.Process(target=target, args=args) for _ in range(processes)]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=600) for _ in workers]
    for worker in workers:
        worker.join()
    each = [o[0] for o in outcomes]
    commits = sum(each)
    return Contention(
        rate=commits / seconds,
        attempts=sum(o[1] for o in outcomes) / commits,
        most=max(o[2] for o in outcomes),
        over_cap=sum(o[3] for o in outcomes) / commits,
        fairness=min(each) / max(each),
    )


#: Process counts of the contention sweep (``python -m bench --plot`` draws them).
PROCESS_COUNTS = (1, 2, 4, 8)


def measure_contention(seconds: float, rounds: int) -> list[Row]:
    """Each round runs 1, 2, 4 and 8 processes, each count on a store of its own, then the
    raw loop with as many processes on a row of its own; the rows are 8 processes against
    1 alone, ours and the raw loop's, with both sweeps attached as series."""
    reset()
    raw = raw_connection()
    rates: dict[int, list[float]] = {count: [] for count in PROCESS_COUNTS}
    raw_rates: dict[int, list[float]] = {count: [] for count in PROCESS_COUNTS}
    attempts: dict[int, list[float]] = {count: [] for count in PROCESS_COUNTS}
    worst = 0
    over_cap: list[float] = []
    fairness: list[float] = []
    raw_fairness: list[float] = []
    for r in range(rounds):
        for count in PROCESS_COUNTS:
            ours = _run_processes(_contend, f"bench-contended-{count}-{r}", count, seconds)
            rates[count].append(ours.rate)
            attempts[count].append(ours.attempts)
            row_id = 1000 + 10 * r + count
            RawStore(raw, row_id, _counter_state("c"))
            theirs = _run_processes(_contend_raw, row_id, count, seconds)
            raw_rates[count].append(theirs.rate)
            if count == PROCESS_COUNTS[-1]:
                worst = max(worst, ours.most)
                over_cap.append(ours.over_cap)
                fairness.append(ours.fairness)
                raw_fairness.append(theirs.fairness)
    raw.close()
    top = PROCESS_COUNTS[-1]
    median = {count: statistics.median(values) for count, values in rates.items()}
    raw_median = {count: statistics.median(values) for count, values in raw_rates.items()}
    counts = [float(count) for count in PROCESS_COUNTS]
    return [
        Row(
            SUITE,
            f"{top} processes on one store",
            median[top],
            "1 process alone",
            median[1],
            "commits/s",
            ">= 0.9x, none over the cap",
            f"{statistics.median(attempts[top]):.2f} commit attempts per commit; at most {worst}, "
            f"over {DEFAULT_CAS_MAX_ATTEMPTS} for {max(over_cap):.2%} of increments; "
            f"{median[top] / raw_median[top]:.2f}x of the raw loop's {top} processes; "
            f"the slowest process made {statistics.median(fairness):.2f}x of the fastest's "
            "commits (median of the rounds)",
            series=[
                Series(
                    "contention",
                    "update_store increments of one store (PostgreSQL)",
                    counts,
                    [median[count] for count in PROCESS_COUNTS],
                ),
                Series(
                    "contention",
                    "raw loop: UPDATE ... WHERE version of the row it last saw",
                    counts,
                    [raw_median[count] for count in PROCESS_COUNTS],
                ),
            ],
        ),
        Row(
            SUITE,
            f"{top} processes on one row, raw loop",
            raw_median[top],
            "1 process alone",
            raw_median[1],
            "commits/s",
            "comparison",
            "the update_store floor's loop (raw UPDATE ... WHERE version of the row it last "
            "saw; after a lost race the client's default backoff, then a read), a process each; "
            f"the slowest process made {statistics.median(raw_fairness):.2f}x of the fastest's "
            "commits",
        ),
    ]


def add_waiters(store_pk: int, instance_id: str, count: int) -> None:
    """Waiter ``e<i>`` reads ``("jobs", i, "status")`` (:func:`.waiter_rows.insert_waiters`),
    then ``ANALYZE``."""
    from django.db import connection

    with connection.cursor() as cursor:
        insert_waiters(cursor.execute, store_pk, instance_id, count)
        cursor.execute("ANALYZE yieldstar_waiter, yieldstar_waiterpath")


def _store_row(client: Any, definition: Any) -> tuple[int, str]:
    """Store ``q`` of ``definition`` (created if missing): its row's primary key and
    instance id."""
    from django.db import connection

    instance_id = client.get_store(definition, "q").instance_id
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM yieldstar_storeinstance WHERE name = %s", [definition.name])
        (store_pk,) = cursor.fetchone()
    return int(store_pk), instance_id


def jobs_state(id: str) -> Any:
    """The stores of the waiter figures: ten jobs, and a field no waiter reads."""
    return {"jobs": [{"status": "new"} for _ in range(10)], "other": 0}


def touch_job(state: Any) -> None:
    """Change ``jobs[5].status``, which waiter ``5`` reads."""
    state["jobs"][5]["status"] = "new" if state["jobs"][5]["status"] == "done" else "done"


def touch_other(state: Any) -> None:
    """Change ``other``, which no waiter reads."""
    state["other"] += 1


def rearm(execution_ids: list[str]) -> None:
    """Register the waiters of ``execution_ids`` again (``woken_at`` reset), as an
    execution whose step still waits does: a waiter is woken once per registration, so
    without this only the first commit of a case that wakes one would wake it."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE yieldstar_waiter SET woken_at = NULL "
            "WHERE execution_id = ANY(%s) AND step_key = 'take'",
            [execution_ids],
        )


def disarm(execution_ids: list[str]) -> None:
    """Mark the waiters of ``execution_ids`` woken, as a change they read leaves them
    until their execution registers them again: a change they read then wakes none."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE yieldstar_waiter SET woken_at = CURRENT_TIMESTAMP "
            "WHERE execution_id = ANY(%s) AND step_key = 'take'",
            [execution_ids],
        )


def timed_updates(client: Any, definition: Any, touch: Any, ops: int, woken: list[str]) -> float:
    """Mean seconds of ``ops`` updates of store ``q`` of ``definition`` by ``touch``, each
    after :func:`rearm` of ``woken`` (not timed, whatever the case wakes)."""
    total = 0.0
    for _ in range(ops):
        rearm(woken)
        started = time.perf_counter()
        client.update_store(definition, "q", updater=touch)
        total += time.perf_counter() - started
    return total / ops


def intents_of(execution_ids: list[str]) -> int:
    """Wake intents written for ``execution_ids`` so far."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM yieldstar_wakeintent WHERE execution_id = ANY(%s)",
            [execution_ids],
        )
        return int(cursor.fetchone()[0])


def check_wakes(woken: list[str], before: int, expected: int) -> None:
    """Raise unless ``expected`` intents were written for ``woken`` since ``before``."""
    written = intents_of(woken) - before
    if written != expected:
        raise RuntimeError(f"the cases that wake one wrote {written} intents, not {expected}")


def measure_waiters(ops: int, rounds: int) -> list[Row]:
    """One update of ``jobs[5].status`` (read by waiter ``e5``, woken) or of ``other`` (read
    by no waiter), on stores with 0, 1,000 and 100,000 waiters, in interleaved rounds."""

    from yieldstar_django.connector import DatabaseStoreClient

    reset()
    client = DatabaseStoreClient()

    stores: dict[int, Any] = {}
    for count in (0, 1_000, 100_000):
        definition = _definition(f"bench-waiters-{count}", jobs_state)
        store_pk, instance_id = _store_row(client, definition)
        if count:
            add_waiters(store_pk, instance_id, count)
        stores[count] = definition
    cases = [(count, touch) for count in stores for touch in (touch_job, touch_other)]
    seconds: dict[tuple[int, Any], list[float]] = {case: [] for case in cases}
    woken = ["e5"]  # the waiter touch_job wakes on each store with waiters
    # The same change of jobs[5] with e5 left woken: the commit finds e5 by its read path,
    # as when it wakes it, and wakes none (the wake's own cost, like for like).
    unarmed: list[float] = []
    before = intents_of(woken)
    for _ in range(rounds):
        for count, touch in cases:
            seconds[(count, touch)].append(timed_updates(client, stores[count], touch, ops, woken))
        disarm(woken)
        unarmed.append(timed_updates(client, stores[100_000], touch_job, ops, []))
    check_wakes(woken, before, 2 * rounds * ops)
    cost = {case: statistics.median(values) * 1e3 for case, values in seconds.items()}
    none = cost[(0, touch_job)]
    counts = list(stores)
    series = [
        Series(
            "commit-cost",
            f"analyzed statistics, {label}",
            [float(count) for count in counts],
            [cost[(count, touch)] for count in counts],
        )
        for label, touch in [
            ("change no waiter read (wakes none)", touch_other),
            ("change one waiter read (wakes 1)", touch_job),
        ]
    ]
    wake_note = "+ its wake intent, handed over on commit"
    rows = [
        Row(SUITE, f"mutation cost, {label}", cost[key], baseline_label, baseline, "ms",
            target, note)
        for label, key, baseline_label, baseline, target, note in [
            ("100,000 waiters, wakes none", (100_000, touch_other), "no waiters",
             cost[(0, touch_other)], "<= 1.5x", "a change no waiter read"),
            ("1,000 waiters, wakes 1", (1_000, touch_job), "no waiters", none, "", wake_note),
            ("100,000 waiters, wakes 1", (100_000, touch_job), "no waiters", none, "<= 1.5x",
             wake_note),
            ("100,000 waiters, wakes 1", (100_000, touch_job), "wakes none of them",
             cost[(100_000, touch_other)], "<= 1.2x",
             "against a change of another field (other), which no waiter read: its intent "
             "row, plus what the change of jobs[5] costs more; WAKE_BACKEND a no-op"),
            ("100,000 waiters, wakes 1", (100_000, touch_job),
             "the same change, its waiter already woken", statistics.median(unarmed) * 1e3,
             "<= 1.2x",
             "the wake's own cost, like for like: the commit finds the waiter either way; "
             "marking it and its intent row; WAKE_BACKEND a no-op"),
        ]
    ]  # fmt: skip
    rows[0].series = series
    return rows


def burst_waiters(store_pk: int, instance_id: str, count: int) -> None:
    """Register ``count`` waiters as :func:`add_waiters` does (``c<store_pk>-<i>``), from a
    connection of its own, in one transaction, and leave the statistics as they were (no
    ``ANALYZE``): a fan-out registering its waiters at once on a fresh database."""
    conn = raw_connection()
    try:
        with conn.transaction():
            insert_waiters(conn.execute, store_pk, instance_id, count, prefix=f"c{store_pk}-")
    finally:
        conn.close()


def measure_cold_waiters(ops: int, rounds: int, *, functions: bool = True) -> list[Row]:
    """Commit cost with 20,000 and 100,000 waiters registered in a burst on a fresh
    database, no ``ANALYZE``, measured on a long-lived connection whose plans were cached
    while the waiter tables were empty, against a commit on a store with no waiters in the
    same rounds. ``functions`` picks the PL/pgSQL commit or the portable statements."""

    from yieldstar_django.connector import DatabaseStoreClient

    reset()  # empty tables, their statistics taken empty (TRUNCATE, VACUUM ANALYZE)
    client = DatabaseStoreClient(use_functions=functions)

    counts = (0, 20_000, 100_000)
    stores = {count: _definition(f"bench-cold-{count}", jobs_state) for count in counts}
    # Warm the connection up on the empty tables: the plans it caches see them empty.
    for _ in range(10):
        for count in counts:
            client.update_store(stores[count], "q", updater=touch_other)
            client.update_store(stores[count], "q", updater=touch_job)

    woken: list[str] = []  # the waiter touch_job wakes on each store with waiters

    def timed(count: int, touch: Callable[[Any], None]) -> float:
        return timed_updates(client, stores[count], touch, ops, woken)

    # The baseline: a commit with no waiter in the database, on the same connection.
    before = statistics.median(timed(0, touch_other) for _ in range(rounds)) * 1e3
    for count in counts[1:]:
        store_pk, instance_id = _store_row(client, stores[count])
        burst_waiters(store_pk, instance_id, count)
        woken.append(f"c{store_pk}-5")
    cases = [(0, touch_other), (20_000, touch_other), (100_000, touch_other)]
    cases.append((100_000, touch_job))
    seconds: dict[tuple[int, Any], list[float]] = {case: [] for case in cases}
    written = intents_of(woken)
    for _ in range(rounds):
        for case in cases:
            seconds[case].append(timed(*case))
    check_wakes(woken, written, rounds * ops)
    cost = {case: statistics.median(values) * 1e3 for case, values in seconds.items()}
    path = "PL/pgSQL commit" if functions else "portable statements"
    note = "burst, no ANALYZE, plans cached on empty tables"
    # The baseline is measured before the burst, not in the rounds: the commit on another
    # store, in the rounds, shows how far the machine drifted meanwhile.
    control = (0, touch_other)

    def against_control(case: tuple[int, Any]) -> str:
        if case == control:
            return "; the control: measured in the rounds"
        return f"; {cost[case] / cost[control]:.2f}x of another store in the same rounds"

    rows = [
        Row(
            SUITE,
            f"cold waiters ({path}), {label}",
            cost[case],
            "no waiter in the database",
            before,
            "ms",
            "<= 1.2x",
            note + extra + against_control(case),
        )
        for label, case, extra in [
            ("another store, no waiters", control, "; 120,000 waiters elsewhere"),
            ("20,000, wakes none", (20_000, touch_other), ""),
            ("100,000, wakes none", (100_000, touch_other), ""),
            (
                "100,000, wakes 1",
                (100_000, touch_job),
                "; its wake intent, WAKE_BACKEND a no-op",
            ),
        ]
    ]
    rows[0].series.append(
        Series(
            "commit-cost",
            f"burst, no ANALYZE, {path} (wakes none)",
            [float(count) for count in counts],
            [cost[(count, touch_other)] for count in counts],
        )
    )
    rows.append(
        Row(
            SUITE,
            f"cold waiters ({path}), 100,000, wakes 1",
            cost[(100_000, touch_job)],
            "wakes none of them",
            cost[(100_000, touch_other)],
            "ms",
            "<= 1.2x",
            note + "; the wake's own cost",
        )
    )
    return rows


def measure_sqlite(ops: int, rounds: int) -> list[Row]:
    """``update_store`` on the SQLite alias (a file of its own) against the raw loop with
    Python's ``sqlite3``, both in SQLite's default journal mode."""
    import json
    import sqlite3
    from pathlib import Path

    from django.conf import settings
    from django.core.management import call_command
    from django.db import connections

    from yieldstar_django.connector import DatabaseStoreClient

    folder = os.environ.get("BENCH_SQLITE_DIR") or Path(settings.BASE_DIR) / "var"
    path = Path(folder) / "bench-connector.sqlite3"
    path.parent.mkdir(parents=True, exist_ok=True)
    for leftover in (path, path.with_name(path.name + "-journal")):
        leftover.unlink(missing_ok=True)
    connections["sqlite"].close()
    settings.DATABASES["sqlite"]["NAME"] = str(path)
    call_command("migrate", "yieldstar", database="sqlite", verbosity=0)
    client = DatabaseStoreClient("sqlite")
    counter = _definition("bench-sqlite", _counter_state)
    client.get_store(counter, "c")

    raw = sqlite3.connect(str(path.with_name("bench-raw.sqlite3")), isolation_level=None)
    raw.execute("DROP TABLE IF EXISTS raw")
    raw.execute("CREATE TABLE raw (id INTEGER PRIMARY KEY, version INTEGER, state TEXT)")
    raw.execute("INSERT INTO raw VALUES (1, 0, ?)", [_dumps(_counter_state("c"))])

    def raw_update() -> None:
        while True:
            version, text = raw.execute("SELECT version, state FROM raw WHERE id = 1").fetchone()
            state = json.loads(text)
            _increment(state)
            updated = raw.execute(
                "UPDATE raw SET state = ?, version = version + 1 WHERE id = 1 AND version = ?",
                [_dumps(state), version],
            ).rowcount
            if updated:
                return

    ours, base = interleaved(
        lambda: client.update_store(counter, "c", updater=_increment),
        raw_update,
        ops=ops,
        rounds=rounds,
    )
    raw.close()
    connections["sqlite"].close()
    return [
        Row(
            SUITE,
            "update_store throughput, SQLite",
            ours,
            "raw sqlite3 SELECT + UPDATE ... WHERE version",
            base,
            "ops/s",
            "",
            "transaction_mode IMMEDIATE, one process",
        )
    ]


def run(quick: bool = False) -> list[Row]:
    setup_django()
    from django.test.utils import override_settings

    migrate()
    with override_settings(YIELDSTAR=YIELDSTAR):
        rows = measure_updates(*((40, 7) if quick else (60, 25)))
        rows += measure_contention(*((2.0, 2) if quick else (4.0, 5)))
        rows += measure_waiters(*((20, 5) if quick else (30, 21)))
        for functions in (True, False):
            cold = (20, 5) if quick else (30, 15)
            rows += measure_cold_waiters(*cold, functions=functions)
        rows += measure_sqlite(*((20, 5) if quick else (40, 15)))
    return rows
