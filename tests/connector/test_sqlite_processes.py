"""SQLite under several processes, as the demo runs it (a web server, a Celery worker of a
few processes and the relay on one file, ``transaction_mode`` IMMEDIATE, a 20 s busy
timeout, SQLite's default rollback journal): real processes on a real file.

``tests/connector/test_races.py`` covers increments, claims, first touches and the
register-versus-mutate race on SQLite too; these add retried steps, readers while a writer
holds the lock, and writers killed in the middle of a commit.
"""

from __future__ import annotations

import itertools
import random
import signal
import time

import pytest
from django.db import connections

from tests.polling import join_or_fail
from tests.shared import workers
from tests.shared.fixtures import SHARED_BARRIER, Spawn, _context, database_names, db

_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}{next(_names)}"


@db("sqlite")
def test_retried_take_steps_claim_each_item_once_across_processes(spawn: Spawn) -> None:
    """Four processes each run the same 40 take steps of one execution (in different
    orders), as redelivered and retried steps do: each step claims one item, once, and
    every process gets that step's recorded item."""
    name = unique("steps")
    keys = [f"s{k}" for k in range(40)]
    results = spawn("take_steps", [("sqlite", name, keys, seed) for seed in range(4)])
    assert all(result == results[0] for result in results), "each step's recorded result"
    assert sorted(results[0].values()) == list(range(40)), "one item per step, none twice"
    with connections["sqlite"].cursor() as cursor:
        cursor.execute("SELECT version FROM yieldstar_storeinstance WHERE name = %s", [name])
        assert cursor.fetchone() == (40,)
        cursor.execute("SELECT count(*) FROM yieldstar_appliedstep WHERE store_name = %s", [name])
        assert cursor.fetchone() == (40,)


def _consistent(name: str) -> int:
    """Check the counter store ``name`` and its history agree, and the file is intact;
    return its version."""
    with connections["sqlite"].cursor() as cursor:
        cursor.execute("PRAGMA integrity_check")
        assert cursor.fetchall() == [("ok",)]
        cursor.execute(
            "SELECT instance_id, version, state FROM yieldstar_storeinstance WHERE name = %s",
            [name],
        )
        rows = cursor.fetchall()
        if not rows:
            return 0
        [(instance_id, version, state)] = rows
        cursor.execute(
            "SELECT count(*), max(version), min(version) FROM yieldstar_storeversion "
            "WHERE instance_id = %s",
            [instance_id],
        )
        assert cursor.fetchone() == (version + 1, version, 0), "one version row per commit"
        cursor.execute(
            "SELECT state FROM yieldstar_storeversion WHERE instance_id = %s AND version = %s",
            [instance_id, version],
        )
        assert cursor.fetchone() == (state,), "the last version row holds the state"
    assert f'"n":{version},' in state, state
    return int(version)


@db("sqlite")
@pytest.mark.slow
def test_a_writer_killed_during_its_commits_leaves_no_half_written_commit(
    spawn: Spawn,
) -> None:
    """A process committing increments of a multi-page state back to back is SIGKILLed at
    a random moment, eight times over: each time the file is intact, the store, its state
    and its version rows agree (the journal rolled back what the process had not
    committed), and the next process goes on from there."""
    name = unique("killed")
    ctx = _context()
    names = database_names()
    rng = random.Random(7)
    yieldstar = {"VERSION_HISTORY_LIMIT": None}
    seen, results = 0, ctx.Queue()
    for _ in range(8):
        process = ctx.Process(
            target=workers.entry,
            args=(
                "increment_until_killed", names, yieldstar, None, results, 0,
                ("sqlite", name, 30_000),
            ),
            daemon=True,
        )  # fmt: skip
        process.start()
        time.sleep(0.6 + rng.random() * 0.4)
        process.kill()
        join_or_fail(process, what="the killed writer")
        assert process.exitcode == -signal.SIGKILL, results.get(timeout=1)

        version = _consistent(name)
        assert version >= seen
        seen = version
    assert seen > 0, "the processes committed"
    spawn("increment", [("sqlite", name, 5, None)], yieldstar=yieldstar)
    assert _consistent(name) == seen + 5


@db("sqlite")
def test_a_writer_killed_inside_its_transaction_commits_nothing(spawn: Spawn) -> None:
    """Killed after its state, version row and wake intent were written, before COMMIT:
    nothing of that commit remains, and the next writer commits (and wakes the waiter)."""
    name = unique("doomed")
    spawn("die_inside_commit", [("sqlite", name)], barrier=False, expect_exit=-signal.SIGKILL)
    with connections["sqlite"].cursor() as cursor:
        cursor.execute("SELECT version, state FROM yieldstar_storeinstance WHERE name = %s", [name])
        assert cursor.fetchall() == [(0, '{"jobs":[],"other":0}')]
        cursor.execute("SELECT count(*) FROM yieldstar_storeversion WHERE store_name = %s", [name])
        assert cursor.fetchone() == (1,)
        cursor.execute("SELECT count(*) FROM yieldstar_wakeintent WHERE execution_id = 'doomed'")
        assert cursor.fetchone() == (0,)
    spawn("increment_jobs", [("sqlite", name)], barrier=False)
    with connections["sqlite"].cursor() as cursor:
        cursor.execute("SELECT version FROM yieldstar_storeinstance WHERE name = %s", [name])
        assert cursor.fetchone() == (1,)
        cursor.execute("SELECT count(*) FROM yieldstar_wakeintent WHERE execution_id = 'doomed'")
        assert cursor.fetchone() == (1,)


@pytest.mark.sqlite  # the admin and the API read ``default``
@pytest.mark.django_db(transaction=True, databases=["default"])
def test_readers_do_not_wait_for_a_writer_holding_the_lock(spawn: Spawn) -> None:
    """A writer keeps its transaction (and the write lock) open until the reader is done;
    meanwhile the store client's read, the HTTP API and the admin's lists answer (a read
    that waited for the lock would fail after the busy timeout): SQLite's rollback journal
    lets readers in until the writer commits, so the demo needs no WAL."""
    from django.contrib.auth.models import User

    name = unique("reads")
    User.objects.create_superuser(f"reader-{name}", password="x")
    _, reads = spawn(
        ["hold_write_lock", "timed_reads"],
        [("default", name, SHARED_BARRIER), ("default", name, SHARED_BARRIER)],
        barrier=False,
    )

    assert {label: status for label, (_, status) in reads.items()} == {
        "client": 404, "api-get": 404, "api-ids": 200, "admin-stores": 200,
        "admin-executions": 200,
    }  # fmt: skip
