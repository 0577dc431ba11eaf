"""Retention: finished executions past ``RETENTION_SECONDS`` go with their
heap, ledger rows and wake intents, in batches; nothing an unfinished execution could
replay is ever deleted. On PostgreSQL and SQLite."""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import CaptureQueriesContext, override_settings
from django.utils import timezone

from tests.shared.fixtures import SHARED_BARRIER
from yieldstar_django.connector import DatabaseStoreClient
from yieldstar_django.core.definition import define_store, unregister_store
from yieldstar_django.core.results import StoreStepId
from yieldstar_django.models import AppliedStep, Execution, ExecutionRun, ExecutionStep, WakeIntent
from yieldstar_django.retention import prune_finished
from yieldstar_django.tasks import prune_executions

DAY = 24 * 3600.0


@pytest.fixture
def counter() -> Any:
    definition = define_store("retention-counter", None, initial=lambda id: {"n": 0})
    yield definition
    unregister_store(definition.name)


def execution(alias: str, id: str, status: str, age_days: float | None) -> Execution:
    """An execution with two heap entries and a delivered intent, ``age_days`` finished."""
    now = timezone.now()
    created = now - timedelta(days=60)
    row = Execution.objects.using(alias).create(
        id=id,
        workflow_id="wf",
        status=status,
        input_json='{"args":[],"kwargs":{}}',
        created_at=created,
        finished_at=None if age_days is None else now - timedelta(days=age_days),
    )
    for position in range(2):
        ExecutionStep.objects.using(alias).create(
            execution=row,
            step_key=f"s{position}",
            position=position,
            kind="update",
            status="completed",
            value_json="1",
        )
    ExecutionRun.objects.using(alias).create(
        execution=row, number=1, lease_owner="t" * 32, worker="w:1", started_at=created
    )
    WakeIntent.objects.using(alias).create(
        execution_id=id,
        workflow_id="wf",
        reason="store",
        available_at=created,
        delivered_at=created,
        attempts=1,
        last_error="",
        created_at=created,
    )
    return row


def count(alias: str, model: Any, execution_id: str) -> int:
    return int(model.objects.using(alias).filter(execution_id=execution_id).count())


def test_prunes_finished_executions_and_keeps_what_can_replay(alias: str, counter: Any) -> None:
    client = DatabaseStoreClient(alias)
    plan = {
        "old-done": ("completed", 40.0),
        "old-failed": ("failed", 31.0),
        "old-cancelled": ("cancelled", 90.0),
        "recent-done": ("completed", 1.0),
        "old-waiting": ("waiting", None),
        "old-running": ("running", None),
    }
    for id, (status, age) in plan.items():
        execution(alias, id, status, age)
        client.update_store(
            counter, "c", updater=lambda s: s.update(n=s["n"] + 1), step_id=StoreStepId(id, "u")
        )
    # A step id that names no execution: a caller's own; never pruned.
    client.update_store(
        counter, "c", updater=lambda s: s.update(n=s["n"] + 1), step_id=StoreStepId("mine", "u")
    )
    before = client.get_store(counter, "c")
    assert before.state == {"n": 7}

    counts = prune_finished(older_than=30 * DAY, batch_size=2, using=alias)

    gone = ["old-done", "old-failed", "old-cancelled"]
    assert (counts.executions, counts.heap_entries, counts.ledger_rows) == (3, 6, 3)
    assert counts.batches >= 2, "batch_size=2 for 3 executions takes two batches"
    remaining = set(Execution.objects.using(alias).values_list("id", flat=True))
    assert remaining == set(plan) - set(gone)
    for id in gone:
        assert count(alias, AppliedStep, id) == 0
        assert count(alias, WakeIntent, id) == 0
        assert ExecutionStep.objects.using(alias).filter(execution_id=id).count() == 0
        assert count(alias, ExecutionRun, id) == 0
    # The ledger rule: every unfinished (and every recent) execution keeps its ledger rows,
    # so its replay returns the recorded result and changes nothing.
    for id in ["recent-done", "old-waiting", "old-running", "mine"]:
        assert count(alias, AppliedStep, id) == 1
        replay = client.update_store(
            counter, "c", updater=lambda s: s.update(n=-1), step_id=StoreStepId(id, "u")
        )
        assert replay.state != {"n": -1}
    for id in ["old-waiting", "old-running"]:
        assert ExecutionStep.objects.using(alias).filter(execution_id=id).count() == 2
        assert count(alias, ExecutionRun, id) == 1
    # Delivered intents as old as the cutoff go too (they served their purpose).
    assert count(alias, WakeIntent, "old-waiting") == 0
    assert client.get_store(counter, "c") == before


def test_command_and_beat_task(alias: str) -> None:
    execution(alias, "done", "completed", 10.0)
    execution(alias, "waiting", "waiting", None)
    out = io.StringIO()
    with override_settings(YIELDSTAR={"RETENTION_SECONDS": None}):
        call_command("yieldstar_prune", database=alias, stdout=out)
        assert "finished execution" not in out.getvalue()
        if alias == "default":
            assert prune_executions() == 0
        assert Execution.objects.using(alias).count() == 2
    with override_settings(YIELDSTAR={"RETENTION_SECONDS": 30 * DAY}):
        call_command("yieldstar_prune", database=alias, stdout=out)
        assert Execution.objects.using(alias).count() == 2, "finished 10 days ago: kept"
        call_command(
            "yieldstar_prune", database=alias, executions_age=5 * DAY, batch_size=1, stdout=out
        )
    assert "deleted 1 finished execution(s)" in out.getvalue()
    if alias == "default":  # the beat task works on the default alias
        execution(alias, "done-again", "completed", 40.0)
        with override_settings(YIELDSTAR={"RETENTION_SECONDS": 30 * DAY}):
            assert prune_executions() == 1
    assert list(Execution.objects.using(alias).values_list("id", flat=True)) == ["waiting"]


@pytest.mark.parametrize("bad", [{"older_than": -1}, {"older_than": 1, "batch_size": 0}])
def test_bad_arguments_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        prune_finished(**{"batch_size": 10, **bad})


def test_pruners_racing_replays_delete_each_finished_execution_once(alias: str, spawn: Any) -> None:
    """Three pruning processes (batches of 4) and one replaying the ledger of unfinished
    executions, at once: every finished execution is deleted by exactly one pruner, and
    no unfinished execution loses a ledger row (no replay re-applies)."""
    name = "retention-race"
    definition = define_store(name, None, initial=lambda id: {"n": 0})
    try:
        client = DatabaseStoreClient(alias)
        unfinished = [f"waiting-{i}" for i in range(15)]
        for i in range(40):
            execution(alias, f"done-{i}", "completed", 2.0)
        for id in [f"done-{i}" for i in range(40)] + unfinished:
            if not id.startswith("done-"):
                execution(alias, id, "waiting", None)
            client.update_store(
                definition,
                "c",
                updater=lambda s: s.update(n=s["n"] + 1),
                step_id=StoreStepId(id, "u"),
            )
        results = spawn(
            ["prune", "prune", "prune", "replay_steps"],
            [
                (alias, 4, SHARED_BARRIER),
                (alias, 4, SHARED_BARRIER),
                (alias, 4, SHARED_BARRIER),
                (alias, name, unfinished, SHARED_BARRIER),
            ],
        )
    finally:
        unregister_store(name)
    assert sum(results[:3]) == 40
    assert results[3] == 0, "a replay of an unfinished execution re-applied its update"
    assert sorted(Execution.objects.using(alias).values_list("id", flat=True)) == sorted(unfinished)
    assert AppliedStep.objects.using(alias).filter(execution_id__in=unfinished).count() == 15
    assert AppliedStep.objects.using(alias).filter(execution_id__startswith="done-").count() == 0


@pytest.mark.parametrize(
    "arguments",
    [
        ["--executions-age", "1e12"],
        ["--executions-age", "nan"],
        ["--executions-age", "inf"],
        ["--intents-age", "1e12"],
        ["--intents-age", "nan"],
    ],
)
def test_the_command_refuses_ages_it_cannot_subtract_from_now(
    alias: str, arguments: list[str]
) -> None:
    """An age past what a datetime can go back to failed with ``OverflowError: date value
    out of range`` (after the executions were pruned, for ``--intents-age``); ``nan``
    pruned nothing and said so."""
    with pytest.raises(CommandError, match=arguments[0]):
        call_command("yieldstar_prune", "--database", alias, *arguments, stdout=io.StringIO())


def test_the_command_deletes_acknowledged_intents_in_batches(db: None, settings: Any) -> None:
    """``--intents-age`` deletes in ``--batch-size`` batches, as the retention page says."""
    settings.YIELDSTAR = {**settings.YIELDSTAR, "RETENTION_SECONDS": None}
    old = timezone.now() - timedelta(days=30)
    WakeIntent.objects.bulk_create(
        WakeIntent(
            execution_id=f"e{i}",
            workflow_id="w",
            reason="wake",
            available_at=old,
            delivered_at=old,
            created_at=old,
        )
        for i in range(5)
    )
    with CaptureQueriesContext(connection) as queries:
        call_command("yieldstar_prune", "--batch-size", "2", stdout=io.StringIO())
    deletes = [
        q["sql"] for q in queries.captured_queries if "DELETE FROM yieldstar_wakeintent" in q["sql"]
    ]
    assert len(deletes) == 3, deletes
    assert not WakeIntent.objects.exists()


@pytest.mark.parametrize(
    "arguments",
    [
        ["--batch-size", "9223372036854775808"],
        ["--batch-size", "100000000000000000000"],
        ["--batch-size", "10001"],
        ["--database", "no-such-alias"],
        ["--database", "nul\x00alias"],
    ],
    ids=["bigint+1", "1e20", "over the most", "unknown alias", "NUL"],
)
def test_the_command_refuses_a_batch_size_or_database_it_cannot_use(
    alias: str, arguments: list[str]
) -> None:
    """A batch size past a 64-bit integer failed in the first query with a traceback
    (``DataError: bigint out of range`` on PostgreSQL, ``OverflowError`` on SQLite), and
    one past the database's limit of query parameters would have failed in the first
    batch with that many executions; an alias that names no database failed with
    ``ConnectionDoesNotExist``. Each is a ``CommandError`` now, and nothing is deleted."""
    execution(alias, "done", "completed", 40.0)
    options = ["--database", alias, "--executions-age", "0", *arguments]
    with pytest.raises(CommandError, match=arguments[0]):
        call_command("yieldstar_prune", *options, stdout=io.StringIO())
    assert Execution.objects.using(alias).filter(pk="done").exists()
    assert WakeIntent.objects.using(alias).filter(execution_id="done").exists()


def test_prune_finished_refuses_a_batch_size_over_the_most() -> None:
    from yieldstar_django.retention import MAX_BATCH_SIZE

    with pytest.raises(ValueError, match="batch_size"):
        prune_finished(older_than=1, batch_size=MAX_BATCH_SIZE + 1)


def test_the_command_keeps_intents_acknowledged_within_intents_age(alias: str) -> None:
    """``--intents-age`` says how long acknowledged intents are kept; with a shorter
    ``--executions-age`` the execution pruning deleted every intent acknowledged before
    its own cutoff too (one acknowledged a minute ago, of a running execution, with
    ``--executions-age 0 --intents-age 3600``)."""
    execution(alias, "running", "running", None)
    WakeIntent.objects.using(alias).filter(execution_id="running").update(
        delivered_at=timezone.now() - timedelta(minutes=1)
    )
    options = ["--database", alias, "--executions-age", "0", "--intents-age", "3600"]
    call_command("yieldstar_prune", *options, stdout=io.StringIO())
    assert count(alias, WakeIntent, "running") == 1
    options = ["--database", alias, "--intents-age", "30"]
    call_command("yieldstar_prune", *options, stdout=io.StringIO())
    assert count(alias, WakeIntent, "running") == 0
