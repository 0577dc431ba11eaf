"""Queues under faults: executions of a queue of concurrency 3 (2 per key, priorities)
and of a rated queue (5 starts a second) run while worker pool processes are SIGKILLed,
the relay is SIGKILLed and restarted, and PostgreSQL is restarted with ``-m immediate``.

The checker (``check_queue_bounds``) reads each execution's start (``admitted_at``) and
finish times from the database and the probe notes the executions' work wrote: at no
instant more than 3 running (nor 2 of one key), no rate window over its limit, no lower
priority admitted while a higher one waited with room for its key, no start lost or
doubled. A killed worker's execution keeps its slot until its successor (a lease
takeover) finishes it, so no slot leaks and none is given twice."""

from __future__ import annotations

import json
import random
import subprocess
import time
from typing import Any

from .checker import check_queue_bounds
from .conftest import FAULT_MARKS, Faults
from .workflows import limited, rated

pytestmark = FAULT_MARKS


def kill_a_pool_process(workers: list[Any]) -> None:
    for worker in random.sample(workers, len(workers)):
        done = subprocess.run(
            ["ps", "-o", "pid=", "--ppid", str(worker.popen.pid)], capture_output=True, text=True
        )
        pids = [int(pid) for pid in done.stdout.split()]
        if pids:
            subprocess.run(["kill", "-KILL", str(random.choice(pids))], check=False)
            return


def executions_of(faults: Faults, queue: str) -> list[dict[str, Any]]:
    with faults.cluster.connect() as conn:
        rows = conn.execute(
            "SELECT id, queue_key, priority, extract(epoch FROM created_at), "
            "extract(epoch FROM admitted_at), extract(epoch FROM finished_at), status "
            "FROM yieldstar_execution WHERE queue = %s",
            [queue],
        ).fetchall()
    return [
        {
            "id": i,
            "key": key,
            "priority": priority,
            "created": float(created),
            "admitted": None if admitted is None else float(admitted),
            "finished": None if finished is None else float(finished),
            "status": status,
        }
        for i, key, priority, created, admitted, finished, status in rows
    ]


def probes(faults: Faults) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for path in faults.history.glob("probes-*.log")
        for line in path.read_text().splitlines()
        if line.strip()
    ]


def test_queue_limits_hold_across_worker_kills_relay_kills_and_a_postgres_restart(
    faults: Faults,
) -> None:
    workers = faults.start_workers()
    relay = faults.start_relay()
    starts = [
        {"args": [0.6], "key": f"k{n % 3}", "priority": random.randrange(3)} for n in range(45)
    ]
    limited_ids = faults.driver("enqueue", limited.name, "faults.probed", json.dumps(starts))
    rated_ids = faults.driver(
        "enqueue", rated.name, "faults.probed", json.dumps([{"args": [0.05]}] * 15)
    )
    faults.executions += limited_ids + rated_ids
    kill_a_pool_process(workers)
    relay.kill()  # the rated queue's starts wait for their window's timers meanwhile
    time.sleep(1.0)
    faults.start_relay()
    kill_a_pool_process(workers)
    assert faults.count("completed") < len(faults.executions), "all ran before the faults"
    faults.cluster.crash()
    time.sleep(2.0)
    faults.cluster.start()
    back = time.time()
    time.sleep(1.0)
    kill_a_pool_process(workers)
    anomalies = faults.verify(timeout=90)
    notes = probes(faults)
    # The recovery: from PostgreSQL back to the first work noted after it.
    faults.recoveries.append(min(n["at"] for n in notes if n["at"] > back) - back)
    anomalies += check_queue_bounds(
        executions_of(faults, limited.name),
        notes,
        concurrency=limited.concurrency,
        per_key=limited.per_key,
        started=limited_ids,
    )
    anomalies += check_queue_bounds(
        executions_of(faults, rated.name), notes, rate=rated.rate, started=rated_ids
    )
    with faults.cluster.connect() as conn:
        counters = conn.execute(
            "SELECT name, running, waiting FROM yieldstar_queue ORDER BY name"
        ).fetchall()
    assert counters == [(limited.name, 0, 0), (rated.name, 0, 0)], counters
    assert anomalies == []
