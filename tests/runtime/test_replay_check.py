"""``yieldstar_check_replay``: histories recorded under one version of a workflow, then
replayed under another. Changed step order, kind or keys are reported by execution and
step; unchanged code and guarded changes (``step.patched``) pass; nothing runs and nothing
is written."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from yieldstar_django import clock, define_store, get_execution, start_workflow
from yieldstar_django.models import (
    AppliedStep,
    Execution,
    ExecutionStep,
    StoreInstance,
    StoreVersion,
    Waiter,
    WakeIntent,
)
from yieldstar_django.runtime import workflow
from yieldstar_django.runtime.registry import unregister_workflow
from yieldstar_django.runtime.replay_check import check_replay
from yieldstar_django.testing import run_until_complete, run_until_idle
from yieldstar_django.testing.cases import inline_settings

NAME = "ys-replay-check"
OTHER = "ys-replay-other"
#: Calls of the step functions: a replay check makes none.
CALLS: list[str] = []

counter = define_store("ys-replay-counter", None, initial=lambda id: {"n": 0})


def fetch() -> str:
    CALLS.append("fetch")
    return "fetched"


def charge() -> str:
    CALLS.append("charge")
    return "charged"


def audit() -> str:
    CALLS.append("audit")
    return "audited"


def _bump(draft: Any) -> None:
    draft["n"] += 1


def original(step: Any, order: str) -> Any:
    """v1: fetch, bump the counter, charge, then sleep an hour, then return."""
    a = yield from step.run(fetch)
    yield from step.update(counter, order, _bump)
    b = yield from step.run(charge)
    yield from step.sleep(3600)
    return [a, b]


def unchanged(step: Any, order: str) -> Any:
    """The same steps as ``original``, another function (a redeploy of the same code)."""
    a = yield from step.run(fetch)
    yield from step.update(counter, order, _bump)
    b = yield from step.run(charge)
    yield from step.sleep(3600)
    return [a, b]


def reordered(step: Any, order: str) -> Any:
    """Charge before fetch: the step at index 0 runs another function."""
    b = yield from step.run(charge)
    yield from step.update(counter, order, _bump)
    a = yield from step.run(fetch)
    yield from step.sleep(3600)
    return [a, b]


def kind_changed(step: Any, order: str) -> Any:
    """Reads the counter where v1 bumped it: another kind at index 1."""
    a = yield from step.run(fetch)
    yield from step.get(counter, order)
    b = yield from step.run(charge)
    yield from step.sleep(3600)
    return [a, b]


def guarded(step: Any, order: str) -> Any:
    """A new step behind ``step.patched``: recorded executions keep the old branch."""
    a = yield from step.run(fetch)
    if (yield from step.patched("audit-before-bump")):
        yield from step.run(audit)
    yield from step.update(counter, order, _bump)
    b = yield from step.run(charge)
    yield from step.sleep(3600)
    return [a, b]


def inserted(step: Any, order: str) -> Any:
    """A new keyed step before recorded ones, unguarded."""
    a = yield from step.run(fetch)
    yield from step.run(audit, key="audit")
    yield from step.update(counter, order, _bump)
    b = yield from step.run(charge)
    yield from step.sleep(3600)
    return [a, b]


def shortened(step: Any, order: str) -> Any:
    """Returns before the recorded charge and sleep."""
    a = yield from step.run(fetch)
    yield from step.update(counter, order, _bump)
    return [a, None]


def extended(step: Any, order: str) -> Any:
    """A step after the sleep: a new frontier, which recorded executions reach later."""
    a = yield from step.run(fetch)
    yield from step.update(counter, order, _bump)
    b = yield from step.run(charge)
    yield from step.sleep(3600)
    c = yield from step.run(audit)
    return [a, b, c]


def boom() -> None:
    CALLS.append("boom")
    raise ValueError("out of stock")


def careful(step: Any, order: str) -> Any:
    """A step that fails and is caught, then a take that waits (a pending heap row)."""
    try:
        yield from step.run(boom)
    except ValueError:
        pass
    return (yield from step.take(counter, order, lambda s: s["n"] >= 5 or None, None))


def careless(step: Any, order: str) -> Any:
    """The same without the ``except``: the recorded error now ends the workflow."""
    yield from step.run(boom)
    return (yield from step.take(counter, order, lambda s: s["n"] >= 5 or None, None))


def _register(fn: Callable[..., Any], name: str = NAME) -> None:
    unregister_workflow(name)
    workflow(name)(fn)


@pytest.fixture(autouse=True)
def _setup() -> Iterator[None]:
    CALLS.clear()
    with inline_settings():
        try:
            yield
        finally:
            clock.reset()
            unregister_workflow(NAME)
            unregister_workflow(OTHER)


@pytest.fixture
def recorded(db: None) -> dict[str, str]:
    """Two executions recorded under ``original``: one completed (created three days ago),
    one sleeping (live); ``CALLS`` cleared after."""
    _register(original)
    done = start_workflow(NAME, "o-done")
    assert run_until_complete(done).status == "completed"
    sleeping = start_workflow(NAME, "o-sleeping")
    run_until_idle()
    assert get_execution(sleeping).status == "sleeping"
    Execution.objects.filter(pk=done).update(created_at=timezone.now() - timedelta(days=3))
    assert CALLS == ["fetch", "charge"] * 2
    CALLS.clear()
    return {"sleeping": sleeping, "done": done}


def _snapshot() -> list[list[dict[str, Any]]]:
    models = (Execution, ExecutionStep, WakeIntent, Waiter, StoreInstance, StoreVersion)
    return [
        *[list(model.objects.order_by("pk").values()) for model in models],
        list(AppliedStep.objects.order_by("pk").values()),
    ]


def _command(*args: str) -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("yieldstar_check_replay", *args, stdout=out)
    except SystemExit as exit:
        return int(exit.code or 0), out.getvalue()
    return 0, out.getvalue()


def test_unchanged_code_passes_and_nothing_runs_or_is_written(recorded: dict[str, str]) -> None:
    before = _snapshot()
    for fn in (original, unchanged, extended, guarded):
        _register(fn)
        report = check_replay()
        assert (report.ok, report.checked, report.mismatches) == (True, 2, []), fn.__name__
    status, out = _command()
    assert status == 0 and "replayed 2 execution(s): 0 mismatch(es)" in out
    assert CALLS == []  # no step function was called
    assert _snapshot() == before


def test_a_changed_step_order_is_reported(recorded: dict[str, str]) -> None:
    before = _snapshot()
    _register(reordered)
    report = check_replay()
    assert {m.execution_id for m in report.mismatches} == set(recorded.values())
    mismatch = report.mismatches[0]
    assert (mismatch.step_key, mismatch.problem) == ("0", "fingerprint")
    assert mismatch.recorded == f"run({__name__}.fetch)"
    assert mismatch.replayed == f"run({__name__}.charge)"
    status, out = _command()
    assert status == 1
    for execution_id in recorded.values():
        assert f"MISMATCH execution {execution_id!r} (workflow {NAME!r}) step '0'" in out
    assert "2 mismatch(es)" in out
    assert CALLS == []
    assert _snapshot() == before


def test_a_changed_step_kind_is_reported(recorded: dict[str, str]) -> None:
    _register(kind_changed)
    status, out = _command("--json")
    report = json.loads(out)
    assert status == 1 and report["ok"] is False
    found = {(m["execution_id"], m["step_key"], m["problem"]) for m in report["mismatches"]}
    assert found == {(e, "1", "kind") for e in recorded.values()}
    assert all(m["recorded"].startswith("update(ys-replay-counter") for m in report["mismatches"])
    assert CALLS == []


def test_an_unguarded_inserted_step_is_reported(recorded: dict[str, str]) -> None:
    _register(inserted)
    mismatches = check_replay().mismatches
    assert {(m.step_key, m.problem) for m in mismatches} == {("audit", "key")}
    assert "before recorded step '1'" in mismatches[0].message


def test_removed_steps_are_reported(recorded: dict[str, str]) -> None:
    _register(shortened)
    mismatches = check_replay().mismatches
    assert {(m.execution_id, m.step_key, m.problem) for m in mismatches} == {
        (e, "2", "removed") for e in recorded.values()
    }


def test_filters_choose_the_executions(recorded: dict[str, str]) -> None:
    _register(reordered)
    assert [m.execution_id for m in check_replay(limit=1).mismatches] == [recorded["sleeping"]]
    assert check_replay(live=True).checked == 1
    since = (timezone.now() - timedelta(days=1)).date().isoformat()
    status, out = _command("--since", since)
    assert status == 1 and recorded["sleeping"] in out and recorded["done"] not in out
    assert _command("--workflow", OTHER) == (0, "replayed 0 execution(s): 0 mismatch(es)\n")
    assert _command("--limit", "1")[1].count("MISMATCH") == 1


def test_a_workflow_no_longer_registered(recorded: dict[str, str]) -> None:
    """A live execution of a workflow this code no longer has cannot run: reported. A
    finished one is skipped."""
    unregister_workflow(NAME)
    report = check_replay()
    assert report.skipped == 1 and report.checked == 1
    assert [(m.execution_id, m.problem) for m in report.mismatches] == [
        (recorded["sleeping"], "unregistered")
    ]


def test_bad_arguments_are_refused(db: None) -> None:
    with pytest.raises(CommandError, match="--since"):
        call_command("yieldstar_check_replay", "--since", "yesterday")
    with pytest.raises(CommandError, match="--limit"):
        call_command("yieldstar_check_replay", "--limit", "0")


def test_recorded_errors_and_waiting_takes_replay(db: None) -> None:
    """A failed step's recorded error is thrown in again (and caught, as first); the
    check of a waiting execution ends at its pending take. Code that no longer catches
    the error ends before the take: reported."""
    _register(careful, OTHER)
    execution_id = start_workflow(OTHER, "o-careful")
    run_until_idle()
    assert get_execution(execution_id).status == "waiting"
    assert CALLS == ["boom"]
    CALLS.clear()
    before = _snapshot()
    assert check_replay(workflow=OTHER).mismatches == []
    _register(careless, OTHER)
    mismatches = check_replay(workflow=OTHER).mismatches
    assert [(m.step_key, m.problem) for m in mismatches] == [("1", "removed")]
    assert "raised ValueError: out of stock" in mismatches[0].message
    assert CALLS == []
    assert _snapshot() == before
