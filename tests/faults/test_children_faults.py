"""A parent of 200 children under worker SIGKILLs, a PostgreSQL restart and a relay kill:
every child exists once and committed its one atomic step exactly once, and the parent
finished with every child's result at its index.

``faults.fan_out`` starts its children in one ``step.start_many`` and waits for them with
one ``step.gather``; each ``faults.child`` writes one probe row (``Entry``, no unique key: a
step committed twice leaves two rows) in a ``step.atomic`` step, pausing inside its
transaction so that faults land there. Meanwhile a pool process of a worker is SIGKILLed
every 0.7 s (every fifth kill a whole worker, replaced), the PostgreSQL cluster is stopped
with ``-m immediate`` and started again in the second round, and the relay is SIGKILLed in
the third and started again three rounds later. The checker (``check_children``) reads the
executions and the probe rows afterwards.

``YIELDSTAR_FAULTS_CHILDREN`` sets the number of children (default 200).
"""

from __future__ import annotations

import os
import random
import subprocess
import time

from .checker import check_children
from .conftest import FAULT_MARKS, Faults
from .figures import FIGURES
from .test_worker_kills import pool_processes, recoveries, started

pytestmark = FAULT_MARKS

CHILDREN = int(os.environ.get("YIELDSTAR_FAULTS_CHILDREN") or 200)
#: Seconds each child's atomic step pauses inside its transaction.
PAUSE = 0.3
MAX_ROUNDS = 200


def test_a_parent_gathers_its_children_once_under_kills_and_restarts(faults: Faults) -> None:
    workers = faults.start_workers()
    relay = faults.start_relay()
    [parent] = faults.start("faults.fan_out", [[CHILDREN, PAUSE]])
    faults.parents.add(parent)
    victims: list[tuple[int, float]] = []
    ready_since = {w.popen.pid: float("-inf") for w in workers}
    kills = restarts = relay_kills = 0
    relay_back_at = -1
    for n in range(MAX_ROUNDS):
        time.sleep(0.7)
        if faults.finished():
            break
        if n == 1:
            faults.cluster.crash()
            time.sleep(1)
            faults.cluster.start()
            restarts += 1
            continue
        if n == 2:
            relay.kill()
            relay_kills += 1
            relay_back_at = n + 3
        if n == relay_back_at:
            relay = faults.start_relay()
        alive = [w for w in workers if w.popen.poll() is None]
        if (n + 1) % 5 == 0 and alive:
            worker = random.choice(alive)
            victims += [(pid, time.time()) for pid in pool_processes(worker)]
            worker.kill()
            workers.remove(worker)
            workers.append(faults.spawn_worker())
            kills += 1
            continue
        pids = [pid for w in started(alive, ready_since) for pid in pool_processes(w)]
        if pids:
            pid = random.choice(pids)
            subprocess.run(["kill", "-KILL", str(pid)], check=False)
            victims.append((pid, time.time()))
            kills += 1
    if relay_back_at >= 0 and relay.popen.poll() is not None:
        faults.start_relay()  # the parent finished before the relay came back
    assert restarts >= 1 and kills >= 2 and relay_kills == 1, (
        f"the parent finished before the faults did ({kills} kills, {restarts} restarts)"
    )
    try:
        anomalies = faults.verify(timeout=300)
    finally:
        faults.recoveries += recoveries(faults, victims)
    with faults.cluster.connect() as conn:
        children = conn.execute(
            "SELECT id, status FROM yieldstar_execution WHERE parent = %s", [parent]
        ).fetchall()
        rows = conn.execute(
            "SELECT e.execution_id, e.token FROM yieldstar_tests_entry e "
            "JOIN yieldstar_execution x ON x.id = e.execution_id WHERE x.parent = %s",
            [parent],
        ).fetchall()
        [(runs,)] = conn.execute(
            "SELECT runs FROM yieldstar_execution WHERE id = %s", [parent]
        ).fetchall()
    found = check_children(CHILDREN, faults.results().get(parent), children, rows)
    FIGURES[-1]["detail"] = (
        f"{len(children)} children, {len(rows)} probe rows; the parent ran {runs} times; "
        f"{kills} SIGKILLs, {restarts} PostgreSQL restart(s), {relay_kills} relay kill"
    )
    assert anomalies == []
    assert found == []
