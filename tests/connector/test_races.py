"""Races between processes, each with its own connection, on PostgreSQL and SQLite."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from django.db import connections

from tests.shared.fixtures import POSTGRES, SHARED_BARRIER, Spawn
from yieldstar_django.connector import DatabaseStoreClient
from yieldstar_django.core.definition import StoreDefinition

_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}{next(_names)}"


@pytest.mark.parametrize("use_functions", [True, False], ids=["function", "statements"])
def test_concurrent_increments_lose_nothing(alias: str, spawn: Spawn, use_functions: bool) -> None:
    if alias == "sqlite" and not use_functions:
        pytest.skip("SQLite has only the statements path (covered by the 'function' case)")
    name = unique("inc")
    attempts = spawn("increment", [(alias, name, 50, use_functions)] * 4)
    client = DatabaseStoreClient(alias)
    snapshot = client.get_store(StoreDefinition(name, None, lambda id: {"n": 0}), "c")
    assert snapshot.state == {"n": 200}
    assert snapshot.version == 200
    assert sum(attempts) >= 200


def test_queue_items_are_claimed_exactly_once(alias: str, spawn: Spawn) -> None:
    name = unique("queue")
    claimed = spawn("take_all", [(alias, name, worker, None) for worker in range(4)])
    every = [item for worker in claimed for item in worker]
    assert sorted(every) == list(range(100)), "each item claimed exactly once"
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT version FROM yieldstar_storeinstance WHERE name = %s", [name])
        assert cursor.fetchone() == (100,)


def test_concurrent_first_touches_record_one_instance(alias: str, spawn: Spawn) -> None:
    name = unique("touch")
    seen = spawn("first_touch", [(alias, name)] * 6)
    assert len(set(seen)) == 1, "every process saw the same instance"
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT instance_id, version FROM yieldstar_storeinstance WHERE name = %s", [name]
        )
        assert cursor.fetchall() == [(seen[0], 0)]
        cursor.execute(
            "SELECT instance_id, version FROM yieldstar_storeversion WHERE store_name = %s",
            [name],
        )
        assert cursor.fetchall() == [(seen[0], 0)], "one version 0, one instance"


@pytest.mark.parametrize("alias", [POSTGRES], indirect=True)
def test_first_touches_by_updates_record_one_instance(alias: str, spawn: Spawn) -> None:
    """Six processes whose first operation on a missing store is an update."""
    name = unique("touchinc")
    spawn("increment", [(alias, name, 1, None)] * 6)
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT version, state FROM yieldstar_storeinstance WHERE name = %s", [name])
        assert cursor.fetchall() == [(6, '{"n":6}')]
        cursor.execute(
            "SELECT count(DISTINCT instance_id), count(*) FROM yieldstar_storeversion "
            "WHERE store_name = %s",
            [name],
        )
        assert cursor.fetchone() == (1, 7)


@pytest.mark.parametrize("use_functions", [None, False], ids=["default", "statements"])
@pytest.mark.slow
def test_register_versus_mutate_loses_no_wake(
    alias: str, spawn: Spawn, use_functions: bool | None
) -> None:
    """1,000 trials: one process takes ``k<t>`` and registers a waiter while the other
    writes ``k<t>``, in a random order. Whoever goes first, a trial whose take did not see
    the write must have a wake intent for its execution: either the registration was stale
    (woken at once) or the write came after it (woken by the write). On PostgreSQL the
    registration is one function call by default; the portable statements race too."""
    if alias == "sqlite" and use_functions is False:
        pytest.skip("SQLite has only the statements path (covered by the 'default' case)")
    name = unique("race")
    trials = 1000
    waited, _ = spawn(
        ["race_waiter", "race_mutator"],
        [
            (alias, name, trials, SHARED_BARRIER, 1, use_functions),
            (alias, name, trials, SHARED_BARRIER, 2),
        ],
        timeout=170,
    )
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT execution_id, reason FROM yieldstar_wakeintent")
        intents = cursor.fetchall()
    woken = Counter(execution for execution, _ in intents)
    reasons = Counter(reason for _, reason in intents)
    lost = [t for t in waited if woken[f"e{t}"] == 0]
    assert lost == [], f"{len(lost)} of {len(waited)} waiting trials lost their wake"
    # Both interleavings that need a wake happened: the write landed between the take and
    # the registration (a stale registration, woken at once) and after the registration.
    assert reasons["stale"] > 0 and reasons["store"] > 0, reasons
    spurious = [e for e in woken if int(e[1:]) not in set(waited)]
    assert spurious == [], "only waiting executions are woken"


@pytest.mark.parametrize(
    "batches",
    [[24], [1, 3, 2, 1, 4, 1, 2, 3, 1, 2, 1, 3]],
    ids=["at-once", "in-bursts"],
)
@pytest.mark.slow
def test_woken_takers_resume_about_once_and_lose_no_wake(
    alias: str, spawn: Spawn, batches: list[int]
) -> None:
    """24 takers in 4 processes wait on one queue; the jobs arrive in one commit or in
    bursts. Every taker gets exactly one job (no wake lost: a woken waiter is not woken
    again until its execution registers it anew, and that registration sees every change
    since its take). Jobs arriving at once wake each taker once: N wakes and resumes for N
    items, where each claim used to wake every taker still registered again."""
    name = unique("takers")
    executions = [f"t{k}" for k in range(24)]
    groups = [(alias, name, executions[k::4], 60.0) for k in range(4)]
    *taken, _ = spawn(
        ["queue_takers"] * 4 + ["queue_producer"],
        [*groups, (alias, name, batches, 0.02)],
        timeout=120,
    )
    items = {e: job for result in taken for e, job in result["items"].items()}
    resumes = {e: n for result in taken for e, n in result["resumes"].items()}
    lost = [e for e, job in items.items() if job is None]
    assert lost == [], f"{len(lost)} takers never woke up for their job"
    assert sorted(items.values()) == list(range(24)), "each job taken exactly once"
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM yieldstar_wakeintent WHERE reason = 'store' AND execution_id IN "
            f"({', '.join(['%s'] * len(executions))})",
            executions,
        )
        wakes = cursor.fetchone()[0]
    if len(batches) == 1:  # each a delivery, and a run unless its execution has finished
        assert (wakes, sum(resumes.values())) == (24, 24), resumes


@pytest.mark.parametrize(
    ("batches", "settle"),
    [([1] * 20, True), ([1] * 20, False), ([3, 1, 4, 1, 5, 2, 1, 3], False)],
    ids=["one-by-one", "racing", "in-bursts"],
)
@pytest.mark.slow
def test_takers_of_one_cohort_resume_twice_an_item_and_lose_no_wake(
    alias: str, spawn: Spawn, batches: list[int], settle: bool
) -> None:
    """20 takers with one selector (a cohort) in 4 processes. Each job wakes the first
    taker of the cohort, whose claim wakes the next (which finds nothing, or the next job):
    jobs arriving one at a time (each once the last was taken and the takers registered
    again) cost 2 resumes each, where every waiting taker was woken by each (about N/2 a
    job). Arriving while takers still check (racing) or in bursts, no job is lost or
    taken twice and no taker left asleep."""
    name = unique("cohort")
    executions = [f"c{k}" for k in range(20)]
    groups = [(alias, name, executions[k::4], 60.0, True) for k in range(4)]
    *taken, _ = spawn(
        ["queue_takers"] * 4 + ["queue_producer"],
        [*groups, (alias, name, batches, 0.01, settle)],
        timeout=120,
    )
    items = {e: job for result in taken for e, job in result["items"].items()}
    resumes = sum(n for result in taken for n in result["resumes"].values())
    lost = [e for e, job in items.items() if job is None]
    assert lost == [], f"{len(lost)} takers never woke up for their job"
    assert sorted(items.values()) == list(range(20)), "each job taken exactly once"
    if settle:
        assert resumes <= 2 * 20, f"{resumes} resumes for 20 jobs"


@pytest.mark.parametrize("alias", [POSTGRES], indirect=True)
@pytest.mark.slow
def test_writes_that_lost_several_races_take_turns(alias: str, spawn: Spawn) -> None:
    """Six processes increment one store without backoff and with a cap of 6 attempts.
    A write that lost 2 races queues for the store (``CAS_QUEUE_AFTER``) and then races
    only fresh writes, so none reaches the cap (``StoreContentionError`` would fail the
    child) and none is lost."""
    name = unique("queued")
    tight = {
        "CAS_MAX_ATTEMPTS": 6,
        "CAS_QUEUE_AFTER": 2,
        "CAS_BACKOFF_BASE": 0,
        "CAS_BACKOFF_MAX": 0,
    }
    attempts = spawn("increment", [(alias, name, 100, None)] * 6, yieldstar=tight)
    snapshot = DatabaseStoreClient(alias).get_store(
        StoreDefinition(name, None, lambda id: {"n": 0}), "c"
    )
    assert snapshot.state == {"n": 600}
    assert sum(attempts) > 600, "the writes did race"


@pytest.mark.parametrize("alias", [POSTGRES], indirect=True)
@pytest.mark.slow
def test_eight_processes_on_one_store_at_the_default_cap(alias: str, spawn: Spawn) -> None:
    """The default settings: eight processes, 100 increments each, no
    ``StoreContentionError``, nothing lost."""
    name = unique("eight")
    spawn("increment", [(alias, name, 100, None)] * 8)
    snapshot = DatabaseStoreClient(alias).get_store(
        StoreDefinition(name, None, lambda id: {"n": 0}), "c"
    )
    assert snapshot.state == {"n": 800}


@pytest.mark.parametrize("use_functions", [None, False], ids=["default", "statements"])
@pytest.mark.slow
def test_register_versus_delete_loses_no_wake(
    alias: str, spawn: Spawn, use_functions: bool | None
) -> None:
    """``delete_store`` removes a store's waiters and wakes them, and registration is
    linearizable with it as with any mutation. 300 trials: one process takes from store
    ``s<t>`` (creating it if missing, matching nothing) and registers a waiter for
    ``e<t>`` on the instance it saw, while the other deletes ``s<t>``, in a random order.
    A waiter whose instance was deleted must have a wake: from the deletion (it found the
    waiter) or from its registration (it found the instance gone: stale). Only a waiter
    on the store's live instance (the deletion came before the take, which created a new
    one) may wait without a wake. A registration that read the row before the deletion
    and committed after it (without its share lock) is the lost wake this catches: with
    the lock taken out of the statements path, it fails (the waiter's insert then even
    names a deleted row)."""
    if alias == "sqlite" and use_functions is False:
        pytest.skip("SQLite has only the statements path (covered by the 'default' case)")
    name = unique("deleted")
    trials = 300
    waited, _ = spawn(
        ["race_delete_waiter", "race_deleter"],
        [
            (alias, name, trials, SHARED_BARRIER, 3, use_functions),
            (alias, name, trials, SHARED_BARRIER, 4, use_functions),
        ],
        timeout=170,
    )
    assert len(waited) == trials
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT execution_id, reason FROM yieldstar_wakeintent")
        intents = cursor.fetchall()
        cursor.execute(
            "SELECT store_id, instance_id FROM yieldstar_storeinstance WHERE name = %s", [name]
        )
        live = dict(cursor.fetchall())
    woken = Counter(execution for execution, _ in intents)
    reasons = Counter(reason for _, reason in intents)
    lost = [t for t, instance in waited if woken[f"e{t}"] == 0 and live.get(f"s{t}") != instance]
    assert lost == [], f"{len(lost)} waiters on a deleted instance were never woken"
    # Both interleavings that need a wake happened, and the one that needs none.
    assert reasons["delete"] > 0 and reasons["missing"] > 0, reasons
    assert any(live.get(f"s{t}") == instance for t, instance in waited), "no take came last"
