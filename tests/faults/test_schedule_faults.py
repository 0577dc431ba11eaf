"""A schedule ticking every second for a minute while workers and relays are SIGKILLed.

Two relays fire the schedule (``catch_up="all"``) and two workers run its ticks, each an
atomic step writing one ``Entry`` row. Every few seconds a fault hits: a busy pool process
killed, a whole worker killed (and another started), one relay killed (and restarted), or
both relays at once for a few seconds (the ticks fall due with no relay, and are caught up
when one is back). Then the checker (``check_ticks``) requires every second of the window
to have started exactly one execution, each completed with its row committed once; and the
schedule's own count of fired ticks to equal the executions (no relay fired a tick another
fired). ``YIELDSTAR_FAULTS_SCHEDULE_SECONDS`` sets how long it ticks (default 60).
"""

from __future__ import annotations

import os
import random
import time

from tests.e2e.conftest import Process, wait_until

from .checker import check_ticks
from .conftest import FAULT_MARKS, Faults
from .figures import FIGURES
from .test_worker_kills import pool_processes

pytestmark = FAULT_MARKS

SECONDS = int(os.environ.get("YIELDSTAR_FAULTS_SCHEDULE_SECONDS") or 60)
NAME = "faults-every-second"
#: Seconds between two faults.
FAULT_EVERY = 3.0


def schedule_row(faults: Faults) -> tuple[float, float | None, int]:
    """(created at, last tick, ticks fired) of the schedule, in epoch seconds."""
    with faults.cluster.connect() as conn:
        row = conn.execute(
            "SELECT extract(epoch FROM created_at), extract(epoch FROM last_tick_at), ticks "
            "FROM yieldstar_schedule WHERE name = %s",
            [NAME],
        ).fetchone()
    assert row is not None
    return float(row[0]), None if row[1] is None else float(row[1]), int(row[2])


def test_a_schedule_ticks_once_a_second_through_worker_and_relay_kills(faults: Faults) -> None:
    workers = faults.start_workers()
    relays = [faults.start_relay(), faults.start_relay()]
    faults.driver("schedule", NAME, "faults.tick", "1", "all", "[0.05]")
    created, _, _ = schedule_row(faults)
    kills = {"pool process": 0, "worker": 0, "relay": 0, "both relays": 0}
    end = time.time() + SECONDS
    n = 0
    while time.time() < end - FAULT_EVERY:
        time.sleep(FAULT_EVERY)
        n += 1
        alive = [w for w in workers if w.popen.poll() is None]
        kind = ("pool process", "relay", "worker", "pool process", "both relays")[n % 5]
        if kind == "pool process":
            pids = [pid for w in alive for pid in pool_processes(w)]
            if pids:
                os.kill(random.choice(pids), 9)
                kills[kind] += 1
        elif kind == "worker" and alive:
            victim = random.choice(alive)
            victim.kill()
            workers.remove(victim)
            workers.append(faults.spawn_worker())
            kills[kind] += 1
        elif kind == "relay":
            relays = restart(faults, relays, 1)
            kills[kind] += 1
        elif kind == "both relays":
            for relay in relays:
                relay.kill()
            time.sleep(2.5)  # ticks fall due with no relay
            relays = restart(faults, relays, 2)
            kills[kind] += 1
    while time.time() < end:
        time.sleep(0.2)
    # Every tick up to the end is fired (caught up), whatever was down.
    wait_until("the schedule to catch up", lambda: (schedule_row(faults)[1] or 0) >= int(end), 60)
    faults.driver("pause", NAME)
    _, last, fired = schedule_row(faults)
    with faults.cluster.connect() as conn:
        ids = [
            row[0]
            for row in conn.execute(
                "SELECT id FROM yieldstar_execution WHERE schedule = %s", [NAME]
            ).fetchall()
        ]
    faults.executions = ids
    unfinished = faults.unfinished_after(90)
    assert unfinished == [], unfinished
    wait_until("no wake intent to be overdue", lambda: faults.overdue_intents() == 0, 30)
    results = faults.results()
    statuses = faults.statuses()
    returned = {e: results[e] if statuses[e] == "completed" else None for e in ids}
    with faults.cluster.connect() as conn:
        rows = [
            (row[0], row[1])
            for row in conn.execute(
                "SELECT execution_id, token FROM yieldstar_tests_entry "
                "WHERE execution_id = ANY(%s)",
                [ids],
            ).fetchall()
        ]
    anomalies = check_ticks(NAME, 1, (created, float(int(end))), returned, rows)
    anomalies += [f"execution {e} ended {s}" for e, s in statuses.items() if s != "completed"]
    if fired != len(ids):
        anomalies.append(f"the schedule fired {fired} ticks for {len(ids)} executions")
    FIGURES.append(
        {
            "fault": faults.name,
            "executions": len(ids),
            "operations": len(rows),
            "anomalies": len(anomalies),
            "not_completed": sum(1 for s in statuses.values() if s != "completed"),
            "recoveries": [],
            "detail": f"{len(ids)} ticks in {SECONDS} s, {fired} fired, faults {kills}, "
            f"last tick {(last or 0) - int(end):+.0f} s after the end",
        }
    )
    assert sum(kills.values()) >= SECONDS // 5, kills
    assert len(ids) >= SECONDS - 2, len(ids)
    assert anomalies == []


def restart(faults: Faults, relays: list[Process], count: int) -> list[Process]:
    """Kill ``count`` of the relays still running (if any) and start as many again."""
    running = [r for r in relays if r.popen.poll() is None]
    for relay in running[:count]:
        relay.kill()
    kept = [r for r in relays if r.popen.poll() is None]
    return kept + [faults.start_relay() for _ in range(len(relays) - len(kept))]
