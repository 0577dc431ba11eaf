"""A store step on a store whose stored state does not decode (a row written by hand, or by
another program writing the tables): the step records ``CorruptStateError`` (naming the
store) as its error, raised into the workflow like any other step error and revived as
that class on replay."""

from __future__ import annotations

from typing import Any

import pytest

from yieldstar_django.models import StoreInstance
from yieldstar_django.runtime import Step, get_execution, start_workflow

from .conftest import Runtime

#: Texts ``decode_durable`` refuses: cut short, a constant JSON has not, an integer past
#: Python's 4,300 digits, nesting past the recursion limit.
CORRUPT = ['{"items": [1, ', "NaN", "9" * 5000, "[" * 100_000 + "]" * 100_000]
IDS = ["truncated", "nan", "huge-int", "deep"]


def first(state: Any) -> Any:
    return state["items"][0] if state["items"] else None


def pop_first(draft: Any, selected: Any) -> None:
    draft["items"].pop(0)


OPERATIONS = {
    "update": lambda step, store: step.update(store, "s", lambda d: d["items"].append(1)),
    "take": lambda step, store: step.take(store, "s", first, pop_first),
    "get": lambda step, store: step.get(store, "s"),
}


@pytest.mark.parametrize("text", CORRUPT, ids=IDS)
@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_a_store_step_on_a_state_that_does_not_decode_records_corrupt_state_error(
    rt: Runtime, operation: str, text: str
) -> None:
    if rt.client.__class__.__name__ == "MemoryStoreClient":
        pytest.skip("needs the database client: the row is corrupted in its table")
    store = rt.define()
    rt.client.get_store(store, "s")  # the row, at version 0
    StoreInstance.objects.filter(name=store.name, store_id="s").update(state=text)

    @rt.workflow
    def wf(step: Step) -> Any:
        try:
            yield from OPERATIONS[operation](step, store)
        except Exception as exc:  # reported: which class, naming what
            caught = [type(exc).__name__, getattr(exc, "store_name", None)]
            caught.append(getattr(exc, "store_id", None))
        else:
            caught = ["no error"]
        yield from step.sleep(0.01)  # the replay after it revives the recorded error
        return caught

    eid = start_workflow(wf)
    rt.settle(lambda: get_execution(eid).is_finished)
    execution = get_execution(eid)
    assert execution.status == "completed", execution.error
    assert execution.result == ["CorruptStateError", store.name, "s"]
    assert rt.steps(eid)["0"].status == "failed"
    row = StoreInstance.objects.get(name=store.name, store_id="s")
    assert (row.state, row.version) == (text, 0), "nothing was written"
