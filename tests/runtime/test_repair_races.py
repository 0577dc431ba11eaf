"""Retries and forks racing in several processes, each with its own connection, on
PostgreSQL and SQLite: concurrent retries of one execution retry it once, a retry of an
execution a run holds is refused, a retry of a cancelled execution whose run still runs
its step leaves that run nothing to record, concurrent forks under one id create it once.

The workflows are in :mod:`tests.shared.race_workflows`; the children run them with the
runtime's tables on the test's alias (:func:`tests.shared.outside.runtime_on`).
"""

from __future__ import annotations

import itertools
from pathlib import Path

from tests.shared import race_workflows
from tests.shared.fixtures import SHARED_BARRIER, Spawn, WakeCollector
from tests.shared.outside import runtime_on
from yieldstar_django.models import Execution, ExecutionStep, WakeIntent
from yieldstar_django.runtime import get_execution, start_workflow
from yieldstar_django.runtime.executions import run_execution

_names = itertools.count()

RACERS = 6


def unique(prefix: str) -> str:
    return f"{prefix}{next(_names)}"


def failed_execution(alias: str, tmp_path: Path) -> tuple[str, Path]:
    """A ``race-repair`` execution that failed at its ``fix`` step (run here)."""
    fix = tmp_path / unique("fix")
    execution_id = unique("repair")
    with runtime_on(alias):
        start_workflow("race-repair", execution_id, str(fix), execution_id=execution_id)
        run_execution(execution_id)
        assert get_execution(execution_id).status == "failed"
    return execution_id, fix


def test_concurrent_retries_of_one_execution_retry_it_once(
    alias: str, spawn: Spawn, wakes: WakeCollector, tmp_path: Path
) -> None:
    """Six processes retry one failed execution at once: exactly one retries it (one
    ``retry`` intent, ``retries == 1``, the failed step's record deleted once); each other
    either lost the race under the row lock (``False``) or looked after the winner
    committed (``ExecutionStateError``: the execution is pending)."""
    execution_id, fix = failed_execution(alias, tmp_path)
    outcomes = spawn("retry_at_once", [(alias, execution_id)] * RACERS)
    assert outcomes.count("True") == 1, outcomes
    assert set(outcomes) <= {"True", "False", "ExecutionStateError"}, outcomes
    with runtime_on(alias):
        execution = Execution.objects.get(pk=execution_id)
        assert (execution.status, execution.retries) == ("pending", 1)
        intents = WakeIntent.objects.filter(execution_id=execution_id, reason="retry")
        assert intents.count() == 1
        assert list(
            ExecutionStep.objects.filter(execution_id=execution_id).values_list("step_key")
        ) == [("inc",)]
        fix.touch()
        run_execution(execution_id)
        execution = get_execution(execution_id)
        assert (execution.status, execution.result) == ("completed", [1, "fixed"])


def test_a_retry_of_an_execution_a_run_holds_is_refused(
    alias: str, spawn: Spawn, wakes: WakeCollector, tmp_path: Path
) -> None:
    """While a run holds the execution inside its step, a retry from another process is
    refused (``ExecutionStateError``: it is running) and the run goes on undisturbed."""
    log = str(tmp_path / "log")
    execution_id = unique("held")
    with runtime_on(alias):
        start_workflow("race-held-run", log, execution_id=execution_id)
    held, retry = spawn(
        ["run_held", "while_held"],
        [(alias, execution_id, SHARED_BARRIER), (alias, execution_id, SHARED_BARRIER, "retry")],
    )
    assert (held, retry) == ("suspended", "ExecutionStateError")
    with runtime_on(alias):
        execution = get_execution(execution_id)
        assert (execution.status, execution.retries) == ("sleeping", 0)


def test_a_retry_of_a_cancelled_execution_whose_run_still_runs_records_once(
    alias: str, spawn: Spawn, wakes: WakeCollector, tmp_path: Path
) -> None:
    """A run holds the execution inside its ``run`` step; another process cancels it,
    retries it and runs the retried execution (which runs the step itself and goes to
    sleep); then the first run returns from its step: its lease was taken from it, so it
    records nothing (``lost``) and the heap holds the step once, recorded by the retried
    run."""
    log = str(tmp_path / "log")
    execution_id = unique("cancelled")
    with runtime_on(alias):
        start_workflow("race-held-run", log, execution_id=execution_id)
    held, other = spawn(
        ["run_held", "while_held"],
        [
            (alias, execution_id, SHARED_BARRIER),
            (alias, execution_id, SHARED_BARRIER, "cancel-retry"),
        ],
    )
    assert held == "lost"
    assert other == "True True suspended"
    assert race_workflows.read_log(log) == ["start", "hold", "start", "hold"]
    with runtime_on(alias):
        execution = get_execution(execution_id)
        assert (execution.status, execution.retries) == ("sleeping", 1)
        steps = list(ExecutionStep.objects.filter(execution_id=execution_id))
        assert [(s.step_key, s.kind, s.status) for s in steps] == [
            ("0", "run", "completed"),
            ("1", "sleep", "pending"),
        ]


def test_concurrent_forks_under_one_id_create_it_once(
    alias: str, spawn: Spawn, wakes: WakeCollector, tmp_path: Path
) -> None:
    """Six processes fork one execution under one id at once: one fork is created (its
    step copied once, one ``fork`` intent) and every call returns its id."""
    source_id, _ = failed_execution(alias, tmp_path)
    fork_id = unique("fork")
    outcomes = spawn("fork_at_once", [(alias, source_id, 1, fork_id)] * RACERS)
    assert outcomes == [fork_id] * RACERS
    with runtime_on(alias):
        fork = Execution.objects.get(pk=fork_id)
        assert (fork.forked_from, fork.fork_step) == (source_id, 1)
        assert ExecutionStep.objects.filter(execution_id=fork_id).count() == 1
        assert WakeIntent.objects.filter(execution_id=fork_id, reason="fork").count() == 1
