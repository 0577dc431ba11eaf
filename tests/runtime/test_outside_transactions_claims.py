"""``take_any`` and leased claims keep the rule of ``test_outside_transactions``: a second
writer commits to the store while the step's selector, claim or ``release`` callback runs
(it would wait on a held lock otherwise), and the heap row commits with the store."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from yieldstar_django.connector import get_store_client
from yieldstar_django.core.definition import define_store
from yieldstar_django.core.durable import decode_durable
from yieldstar_django.models import ClaimLeaseRecord, ExecutionStep
from yieldstar_django.runtime.steps import Step

from .test_outside_transactions import (  # noqa: F401  (fixtures)
    Gate,
    names,
    routed,
    run_while_pushed,
)


@pytest.mark.parametrize("kind", ["take_any-selector", "take_any-claim", "lease", "release"])
def test_a_second_writer_commits_while_a_claiming_step_runs_user_code(
    routed: str,  # noqa: F811  (the fixture imported above)
    kind: str,
    names: Callable[[str], str],  # noqa: F811
) -> None:
    gate = Gate()

    def give_back(draft: Any, value: Any) -> None:
        if kind == "release":
            gate()
        draft["items"].append(value)

    store = define_store(
        names("store"), None, initial=lambda id: {"items": [1], "n": 0}, release=give_back
    )

    def selector(s: Any) -> Any:
        if kind == "take_any-selector":
            gate()
        return s["items"][0] if s["items"] else None

    def claim(d: Any, selected: Any) -> None:
        if kind in ("take_any-claim", "lease"):
            gate()
        d["items"].pop(0)

    def wf(step: Step) -> Any:
        if kind.startswith("take_any"):
            index, taken = yield from step.take_any([(store, "s", selector, claim)], key="op")
            return [index, taken]
        lease = yield from step.take(store, "s", selector, claim, lease=60, key="op")
        if kind == "release":
            return (yield from step.release(lease, key="end"))
        return lease.value

    outcome = run_while_pushed(routed, names("wf"), wf, store, gate)

    assert outcome.kind == "completed", outcome
    state = get_store_client(routed).get_store(store, "s").state
    result = decode_durable(outcome.result_json)
    if kind.startswith("take_any"):
        assert result == [0, 1] and state["items"] == [2]
    elif kind == "lease":
        assert result == 1 and state["items"] == [2]
        assert ClaimLeaseRecord.objects.using(routed).get().state == "held"
    else:
        assert result is True and state["items"] == [2, 1]
        assert ClaimLeaseRecord.objects.using(routed).get().state == "released"
    assert ExecutionStep.objects.using(routed).get(execution_id="e1", step_key="op").status == (
        "completed"
    )
