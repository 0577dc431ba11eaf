"""A primary failover under load, with pg_auto_failover.

``scripts/failover_cluster.sh`` makes a formation on this machine: a monitor, a primary
(node1) and a synchronous secondary (node2), each its own PostgreSQL. Every process of
the suite (workers, relay, driver) connects with a multi-host URL in the form production
uses, ``postgres://...@host1:port1,host2:port2/db?target_session_attrs=read-write``, read
by the demo's ``DATABASE_URL`` parser: libpq tries the hosts in turn and keeps the one
that accepts writes.

Under the suite's load (workers draining queues: store takes, run steps and a store
update per execution; executions that first sleep on a durable timer, so only the relay
wakes them; a producer pushing items one commit each), every process of the primary's
node is SIGKILLed: its keeper, its postmaster and its backends, as if its machine died.
The monitor promotes the secondary. The independent checker then finds, over the whole
history, no acknowledged commit lost (every acknowledged push is taken, the store
histories are linearizable across the two primaries), no item claimed twice, and no
execution stranded (every one completes, no wake intent stays overdue).

Figures, printed with the suite's others: the time from the kill to the first commit on
the new primary (the first store operation begun after the kill that completed), and to
every execution moving on (for each execution unfinished at the kill, its first store
operation begun after the kill; the slowest). ``YIELDSTAR_FAULTS_FAILOVER_EXECUTIONS``
sets the drain's executions (20).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.e2e.conftest import ROOT, Broker, _free_port
from tests.polling import wait_until

from .checker import load_history
from .conftest import FAULT_MARKS, Faults
from .figures import FIGURES
from .formation import Formation, available, make_formation
from .workload import fill_queue, start_drain

pytestmark = FAULT_MARKS

EXECUTIONS = int(os.environ.get("YIELDSTAR_FAULTS_FAILOVER_EXECUTIONS", "20"))
TERMINAL = {"completed", "failed", "cancelled"}


@pytest.fixture(scope="module")
def formation() -> Iterator[Formation]:
    why = available()
    if why:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    directory = Path(tempfile.mkdtemp(prefix="yieldstar-failover-"))
    formation = make_formation(directory, (_free_port(), _free_port(), _free_port()))
    try:
        formation.init()
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
            cwd=ROOT,
            env={
                **os.environ,
                "DJANGO_SETTINGS_MODULE": "tests.faults.settings",
                **formation.settings_env(),
            },
            check=True,
        )
        yield formation
    finally:
        formation.destroy()


@pytest.fixture
def world(formation: Formation, broker: Broker, tmp_path: Path) -> Iterator[Faults]:
    faults = Faults("test_primary_failover_under_load", formation, broker, tmp_path)
    try:
        yield faults
    finally:
        faults.stop_all()


def _first_after(ops: list[Any], moment: float) -> float | None:
    """When the first op begun after ``moment`` completed (``None``: none did)."""
    done = [op.complete for op in ops if op.invoke > moment and op.complete is not None]
    return min(done) if done else None


def test_the_formation_replicates_synchronously(formation: Formation) -> None:
    """The primary has a synchronous standby (``pg_stat_replication``: ``sync`` or
    ``quorum``), so it acknowledges a commit once the standby has it; the row shows there."""
    marker = uuid.uuid4().hex
    with formation.connect() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS failover_probe (marker text)")
        conn.execute("INSERT INTO failover_probe VALUES (%s)", [marker])
        row = conn.execute(
            "SELECT sync_state FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum')"
        ).fetchone()
    assert row is not None
    deadline = time.monotonic() + 10
    standby = formation.standby_port if formation.primary() == "node1" else formation.port
    with psycopg.connect(
        host="127.0.0.1", port=standby, user="postgres", dbname="yieldstar_faults",
        autocommit=True,
    ) as conn:  # fmt: skip
        while True:
            found = conn.execute(
                "SELECT count(*) FROM failover_probe WHERE marker = %s", [marker]
            ).fetchone()
            if (found and found[0] == 1) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    assert found is not None and found[0] == 1


def test_primary_failover_under_load(world: Faults, formation: Formation) -> None:
    assert formation.primary() == "node1"
    assert formation.synchronous() != ""  # commits wait for the standby
    world.start_workers()
    world.start_relay()
    queue_id = fill_queue(world, EXECUTIONS * 6)
    # Each execution works 6 x 0.25 s: none can have finished when the kill comes.
    start_drain(world, queue_id, executions=EXECUTIONS, each=6, pause=0.25)
    # Executions asleep on durable timers that fall due during the failover.
    nap_queue = fill_queue(world, 0)
    start_drain(world, nap_queue, executions=4, each=10, nap=3.0)
    # A producer commits pushes before, during and after the failover.
    producer = world.push_in_background(nap_queue, "item", 40, 0.1)
    filled = world.operations()
    wait_until("the drain to be under way", lambda: world.operations() > filled + EXECUTIONS, 30)
    unfinished = {e for e, s in world.statuses().items() if s not in TERMINAL}
    assert len(unfinished) >= len(world.executions) // 2  # the kill comes under load
    node, killed = formation.kill_primary()
    wait_until("the secondary to accept writes", lambda: formation.primary() != node, 60)
    assert producer.popen.wait(120) == 0
    anomalies = world.verify(timeout=120)
    assert world.count("completed") == len(world.executions)

    stores = load_history(world.history)
    ops = [op for store_ops in stores.values() for op in store_ops]
    first = _first_after(ops, killed)
    assert first is not None, "no commit after the kill"
    moving_on: list[float] = []
    for execution in unfinished:
        own = [op for op in ops if (op.step or "").startswith(f"{execution}/")]
        at = _first_after(own, killed)
        if at is not None:  # else it made its last store step before the kill
            moving_on.append(at - killed)
    world.recoveries += moving_on
    FIGURES[-1]["detail"] = (
        f"kill to first commit on the new primary {first - killed:.2f}s, to every "
        f"execution moving on {max(moving_on):.2f}s ({len(moving_on)} executions); "
        f"formation made in {formation.created_in:.0f}s"
    )
    assert anomalies == []
    assert formation.primary() == "node2"
