"""Atomic steps under worker SIGKILLs and PostgreSQL immediate restarts: every step's row
of a project's own table commits exactly once.

Executions of ``faults.ledger`` run ``step.atomic`` steps that each write one ``Entry``
row (no unique key: a step committed twice leaves two rows) and add 1 to the execution's
own tally through the store client, pausing inside the step's transaction so that faults
land there. Meanwhile a pool process of a worker is SIGKILLed every 0.7 s (every fifth kill
a whole worker, replaced), and in the third round and every ``RESTART_EVERY``-th round after
it the PostgreSQL cluster is stopped with ``-m immediate`` and started again. The checker
(``check_entries``) then reads the table: no step's row duplicated, none missing, each the
row of the attempt whose token the step returned, each tally equal to its execution's
rows; and the tallies' histories are linearizable (``check_register``).

``YIELDSTAR_FAULTS_ATOMIC_STEPS`` sets the number of atomic steps (default 1,000, which
keeps the suite within its time budget; the acceptance run uses 10,000).
"""

from __future__ import annotations

import os
import random
import subprocess
import time

from .conftest import FAULT_MARKS, Faults
from .figures import FIGURES
from .test_worker_kills import pool_processes, recoveries, started
from .workload import start_ledgers

pytestmark = FAULT_MARKS

#: Atomic steps in all, in executions of ``PER_EXECUTION`` steps.
STEPS = int(os.environ.get("YIELDSTAR_FAULTS_ATOMIC_STEPS") or 1000)
PER_EXECUTION = 50
#: Seconds each step pauses inside its transaction (with the default size, the work lasts
#: several seconds however idle the machine, so the first restart lands under load).
PAUSE = 0.02
#: A PostgreSQL restart every this many fault rounds, the first in the third round (the
#: others kill a pool process).
RESTART_EVERY = 12
#: Most fault rounds, whatever the size: the faults stop, the run then finishes.
MAX_ROUNDS = 400


def test_atomic_steps_commit_once_under_worker_kills_and_postgres_restarts(
    faults: Faults,
) -> None:
    workers = faults.start_workers()
    faults.start_relay()
    executions = max(STEPS // PER_EXECUTION, 1)
    start_ledgers(faults, executions, PER_EXECUTION, pause=PAUSE)
    victims: list[tuple[int, float]] = []
    ready_since = {w.popen.pid: float("-inf") for w in workers}
    kills = restarts = 0
    for n in range(MAX_ROUNDS):
        time.sleep(0.7)
        if faults.finished():
            break
        if n % RESTART_EVERY == 2:
            faults.cluster.crash()
            time.sleep(1)
            faults.cluster.start()
            restarts += 1
            continue
        alive = [w for w in workers if w.popen.poll() is None]
        if (n + 1) % 5 == 0 and alive:
            worker = random.choice(alive)
            pids = pool_processes(worker)
            worker.kill()
            victims += [(pid, time.time()) for pid in pids]
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
    assert restarts >= 1 and kills >= 5, (
        f"the executions finished before the faults did ({kills} kills, {restarts} restarts)"
    )
    try:
        anomalies = faults.verify(timeout=300)
    finally:
        faults.recoveries += recoveries(faults, victims)
    FIGURES[-1]["detail"] = (
        f"{faults.entries()} atomic-step rows of {STEPS}; {kills} SIGKILLs, "
        f"{restarts} PostgreSQL restarts"
    )
    assert anomalies == []
    assert faults.entries() == STEPS
