"""20 worker SIGKILLs during a 300-item queue drain by 30 executions.

Most kills hit one busy pool process of a worker (Celery's prefork parent starts another);
every fifth kills a whole worker, pool and parent, and a new worker is started. A new
worker's pool processes are spared until it has been ready for ``STARTED_FOR`` seconds:
Celery checks that its pool started right after it logs "ready.", and a pool process
killed before that check makes the whole worker exit ("Could not start worker
processes"), which would leave no worker for the next kills. The recovery of a kill is
the time until the execution the dead process was running records its next store
operation (in another process).

Runs on Redis (one broker keeps the suite within its time budget; the end-to-end
recovery test, ``tests/e2e/test_recovery.py``, kills workers on both). A wake handed to a
worker that is then killed is delivered again by the relay (it is acknowledged only when a
run starts), and a killed run's lease is taken over when it expires, so no execution is
left unfinished."""

from __future__ import annotations

import random
import subprocess
import time

from tests.e2e.conftest import WORKER_READY, Process

from .checker import load_history
from .conftest import FAULT_MARKS, Faults
from .workload import fill_queue, start_drain

pytestmark = FAULT_MARKS

KILLS = 20
#: Seconds a worker has been seen ready before its pool processes may be killed.
STARTED_FOR = 1.0


def pool_processes(worker: Process) -> list[int]:
    done = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(worker.popen.pid)], capture_output=True, text=True
    )
    return [int(pid) for pid in done.stdout.split()]


def test_twenty_worker_sigkills_during_a_queue_drain(faults: Faults) -> None:
    workers = faults.start_workers()
    faults.start_relay()
    queue_id = fill_queue(faults, 300)
    start_drain(faults, queue_id, executions=30, each=10, pause=0.15)
    victims: list[tuple[int, float]] = []  # (pid, when)
    ready_since = {w.popen.pid: float("-inf") for w in workers}  # waited for above
    for n in range(KILLS):
        time.sleep(0.7)
        alive = [w for w in workers if w.popen.poll() is None]
        if (n + 1) % 5 == 0:
            assert alive, exited(workers, n + 1)
            worker = random.choice(alive)
            pids = pool_processes(worker)
            worker.kill()
            now = time.time()
            victims += [(pid, now) for pid in pids]
            workers.remove(worker)
            replacement = faults.spawn_worker()
            workers.append(replacement)
        else:
            pids = [pid for w in started(alive, ready_since) for pid in pool_processes(w)]
            if not pids:
                continue
            pid = random.choice(pids)
            subprocess.run(["kill", "-KILL", str(pid)], check=False)
            victims.append((pid, time.time()))
    assert faults.count("completed") < 30, "the drain ended before the kills did"
    try:
        anomalies = faults.verify(timeout=45)
    finally:
        faults.recoveries += recoveries(faults, victims)
    assert anomalies == []


def started(workers: list[Process], ready_since: dict[int, float]) -> list[Process]:
    """Those of ``workers`` seen ready at least ``STARTED_FOR`` seconds ago (noting when
    each is first seen ready in ``ready_since``, by pid)."""
    now = time.monotonic()
    for worker in workers:
        if worker.popen.pid not in ready_since and WORKER_READY in worker.output():
            ready_since[worker.popen.pid] = now
    return [w for w in workers if now - ready_since.get(w.popen.pid, now) >= STARTED_FOR]


def exited(workers: list[Process], kill: int) -> str:
    """Why no worker is left to kill (those killed whole left the list): each one's exit
    status and the end of its log."""
    tails = "\n".join(f"exit {w.popen.returncode}: {w.output()[-1500:]}" for w in workers)
    return f"every worker exited on its own before kill {kill}:\n{tails}"


def recoveries(faults: Faults, victims: list[tuple[int, float]]) -> list[float]:
    """Per kill of a process that was running an unfinished execution: seconds from the
    kill to that execution's next completed store operation."""
    ops = [op for store in load_history(faults.history).values() for op in store]
    delays = []
    for pid, killed in victims:
        mine = [op for op in ops if op.process.endswith(f"-{pid}") and op.step]
        if not mine:
            continue
        last = max(mine, key=lambda op: op.invoke)
        execution = (last.step or "").split("/")[0]
        later = [
            op.complete
            for op in ops
            if op.complete is not None
            and op.complete > killed
            and (op.step or "").startswith(execution + "/")
        ]
        if later:
            delays.append(min(later) - killed)
    return delays
