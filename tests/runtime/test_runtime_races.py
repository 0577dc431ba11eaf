"""Runs of one execution racing in several processes, each with its own connection, on
PostgreSQL and SQLite: idempotent starts, one run at a time (and a wake during a run
running it again), and a step's update applied once when a paused run and its successor
commit together.

The workflows are in :mod:`tests.shared.race_workflows`; the children run them with
the runtime's tables on the test's alias (:func:`tests.shared.outside.runtime_on`).
"""

from __future__ import annotations

import itertools
from pathlib import Path

from tests.shared import race_workflows
from tests.shared.fixtures import SHARED_BARRIER, Spawn, WakeCollector
from tests.shared.outside import runtime_on
from yieldstar_django.connector import get_store_client
from yieldstar_django.models import (
    AppliedStep,
    Execution,
    ExecutionRun,
    ExecutionStep,
    WakeIntent,
)
from yieldstar_django.runtime import get_execution, start_workflow
from yieldstar_django.runtime.leases import worker_name

_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}{next(_names)}"


def test_concurrent_starts_with_one_execution_id_create_it_once(
    alias: str, spawn: Spawn, wakes: WakeCollector
) -> None:
    """Six processes start one ``execution_id`` at once, as two workflows with two
    arguments: exactly one start creates the execution (with its workflow and argument)
    and requests its first run (one ``start`` intent); the other starts of that workflow
    with that argument return the id and do nothing, and the others are refused with an
    ``ExecutionConflictError`` naming what differs (the workflow, else the arguments),
    whichever process won. (With other arguments a start returned the id too.)"""
    execution_id = unique("start")
    starts = [("race-update-once", "a"), ("race-other", "a"), ("race-update-once", "b")] * 2
    outcomes = spawn("start_same_id", [(alias, wf, execution_id, arg) for wf, arg in starts])
    assert outcomes.count("created") == 1, outcomes
    winner = starts[outcomes.index("created")]
    for (wf, arg), outcome in zip(starts, outcomes, strict=True):
        if wf != winner[0]:
            assert outcome == "refused workflow", outcomes
        elif arg != winner[1]:
            assert outcome == "refused arguments", outcomes
        else:
            assert outcome in ("created", "existing"), outcomes
    with runtime_on(alias):
        [execution] = Execution.objects.filter(pk=execution_id)
        assert execution.workflow_id == winner[0]
        assert execution.input == {"args": [winner[1]], "kwargs": {}}
        intents = WakeIntent.objects.filter(execution_id=execution_id)
        assert list(intents.values_list("reason", flat=True)) == ["start"]


def test_a_paused_run_and_its_successor_committing_together_apply_an_update_once(
    alias: str, spawn: Spawn, wakes: WakeCollector
) -> None:
    """A run pauses in its ``step.update``'s updater until its lease expired (a worker
    stopped past ``LEASE_SECONDS``); another process's run takes the lease over and
    reaches the same updater; then both compute and commit at once. The update is applied
    exactly once (the counter is 1, at version 1, with one ledger row and one heap row):
    the paused run's commit is fenced by the lease it lost and records nothing (``lost``),
    the successor's completes the execution. Without the fence and the ledger the counter
    would be 2."""
    execution_id = unique("once")
    with runtime_on(alias):
        start_workflow("race-update-once", execution_id, execution_id=execution_id)
    # A long lease: no renewal of the paused run's lease happens during the test.
    paused, successor = spawn(
        ["run_paused_then_expired", "run_after_the_expiry"],
        [(alias, execution_id, SHARED_BARRIER)] * 2,
        yieldstar={"LEASE_SECONDS": 60},
    )
    assert (paused, successor) == ("lost", "finished")
    with runtime_on(alias):
        execution = get_execution(execution_id)
        assert (execution.status, execution.result) == ("completed", [1, 1])
        snapshot = get_store_client(alias).get_store(race_workflows.COUNTER, execution_id)
        assert (snapshot.state, snapshot.version) == ({"n": 1}, 1)
        assert AppliedStep.objects.filter(execution_id=execution_id).count() == 1
        steps = ExecutionStep.objects.filter(execution_id=execution_id, step_key="inc")
        assert list(steps.values_list("status", flat=True)) == ["completed"]


def test_resumes_at_once_run_one_at_a_time_and_a_wake_during_the_run_runs_it_again(
    alias: str, spawn: Spawn, wakes: WakeCollector, tmp_path: Path
) -> None:
    """Four processes resume one execution at the same moment (duplicate deliveries).
    One takes the lease (one run row) and stays inside its ``run`` step until the other three have
    returned: they found the lease held and flagged a wake (``busy``). The step's function
    ran once (two runs at once would run it twice, or break the barrier), and the holder,
    seeing the flag when it suspended, replayed once more before letting the lease go:
    the body started twice, under one lease."""
    log = str(tmp_path / "events")
    with runtime_on(alias):
        execution_id = start_workflow("race-held-run", log)
    results = spawn("resume_at_once", [(alias, execution_id, SHARED_BARRIER)] * 4)
    assert sorted(results) == ["busy", "busy", "busy", "suspended"], results
    assert race_workflows.read_log(log) == ["start", "hold", "start"]
    with runtime_on(alias):
        execution = get_execution(execution_id)
        assert (execution.status, execution.runs) == ("sleeping", 1)
        assert (execution.lease_owner, execution.wake_pending) == ("", False)
        # One taking of the lease, one run row, written and ended by the child that took
        # it (its own process, not this one), with the lease's statements.
        [run] = ExecutionRun.objects.using(alias).filter(execution_id=execution_id)
        assert (run.number, run.outcome) == (1, "sleeping")
        assert run.ended_at is not None and run.worker != worker_name()


def test_cancels_and_a_wake_racing_during_a_run_cancel_once_and_record_nothing_more(
    alias: str, spawn: Spawn, wakes: WakeCollector, tmp_path: Path
) -> None:
    """A run is inside its ``run`` step when two processes cancel the execution and a
    third resumes it (a wake delivered meanwhile), all at once. Exactly one cancel says
    ``True``; the resume finds the lease held (``busy``) or the execution finished
    (``gone``); the run, going on, records nothing more and ends ``lost`` (no replay, no
    completed step, no waiter, no sleep timer), and no wake is left to deliver (the
    cancel acknowledged them, the lease's takeover timer included)."""
    from yieldstar_django.models import Waiter

    log = str(tmp_path / "events")
    with runtime_on(alias):
        execution_id = start_workflow("race-held-run", log)
    held, *others = spawn(
        ["run_held", "while_held", "while_held", "while_held"],
        [
            (alias, execution_id, SHARED_BARRIER),
            (alias, execution_id, SHARED_BARRIER, "cancel"),
            (alias, execution_id, SHARED_BARRIER, "cancel"),
            (alias, execution_id, SHARED_BARRIER, "resume"),
        ],
    )
    *cancels, resumed = others
    assert held == "lost"
    assert sorted(cancels) == ["False", "True"], cancels
    assert resumed in ("busy", "gone"), resumed
    assert race_workflows.read_log(log) == ["start", "hold"]
    with runtime_on(alias):
        execution = get_execution(execution_id)
        assert (execution.status, execution.lease_owner) == ("cancelled", "")
        assert not ExecutionStep.objects.filter(execution_id=execution_id).exists()
        assert not Waiter.objects.filter(execution_id=execution_id).exists()
        pending = WakeIntent.objects.filter(execution_id=execution_id, delivered_at=None)
        assert list(pending.values_list("reason", flat=True)) == []


def test_a_paused_run_and_its_successor_starting_children_together_start_them_once(
    alias: str, spawn: Spawn, wakes: WakeCollector
) -> None:
    """A run pauses just before its ``step.start_many`` until its lease expired; another
    process's run takes the lease over and reaches the same step; then both start the
    children at once. Each child exists once, with one request of its first run, and the
    step has one heap row: the paused run's children and row commit together, fenced by
    the lease it lost, so they roll back together (``lost``), or its insert of a child its
    successor committed first is refused (``IntegrityError``)."""
    execution_id = unique("children")
    with runtime_on(alias):
        start_workflow("race-start-children", 3, execution_id=execution_id)
    paused, successor = spawn(
        ["run_paused_or_refused", "run_after_the_expiry"],
        [(alias, execution_id, SHARED_BARRIER)] * 2,
        yieldstar={"LEASE_SECONDS": 60},
    )
    assert paused in ("lost", "IntegrityError"), paused
    assert successor == "finished", successor
    with runtime_on(alias):
        children = [f"{execution_id}:kids:{i}" for i in range(3)]
        assert get_execution(execution_id).result == children
        rows = Execution.objects.filter(parent=execution_id).order_by("pk")
        assert list(rows.values_list("id", flat=True)) == children
        intents = WakeIntent.objects.filter(execution_id__in=children, reason="start")
        assert intents.count() == 3
        steps = ExecutionStep.objects.filter(execution_id=execution_id, step_key="kids")
        assert steps.count() == 1
