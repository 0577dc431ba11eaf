"""``step.delete``: a store deleted exactly once, its receipts kept; the per-entity pattern."""

from __future__ import annotations

from typing import Any

import pytest

from yieldstar_django.core.definition import StoreDefinition
from yieldstar_django.core.results import StoreStepId, StoreUpdateResult
from yieldstar_django.models import AppliedStep, ExecutionStep, StoreInstance, Waiter
from yieldstar_django.runtime import Step, get_execution, start_workflow
from yieldstar_django.runtime.leases import LeaseLost

from .conftest import Runtime


def first(state: Any) -> Any:
    return state["items"][0] if state["items"] else None


def pop_first(draft: Any, selected: Any) -> None:
    draft["items"].pop(0)


def exists(rt: Runtime, store: StoreDefinition, id: str) -> bool:
    return id in rt.client.list_stores(store)


def test_delete_removes_the_store_once_and_replays_its_answer(rt: Runtime) -> None:
    orders = rt.define()

    @rt.workflow
    def wf(step: Step) -> Any:
        yield from step.update(orders, "o-1", lambda d: d["items"].append("paid"))
        deleted = yield from step.delete(orders, "o-1")
        yield from step.sleep(0.01)  # the run after the timer replays the delete
        again = yield from step.delete(orders, "o-1", key="again")
        return [deleted, again]

    eid = start_workflow(wf)
    rt.settle(lambda: get_execution(eid).is_finished)
    assert get_execution(eid).result == [True, False]
    assert not exists(rt, orders, "o-1")
    steps = rt.steps(eid)
    assert steps["1"].kind == "delete" and steps["1"].value_json == "true"
    assert steps["again"].value_json == "false"


def test_a_delete_step_leaves_its_receipt_and_the_store_s_other_receipts(rt: Runtime) -> None:
    """The ledger keeps what steps did on the store across its deletion: a retried call of
    the delete or of an earlier update returns its recorded result and creates nothing."""
    orders = rt.define()

    @rt.workflow
    def wf(step: Step) -> Any:
        yield from step.update(orders, "o-2", lambda d: d["items"].append("paid"), key="pay")
        return (yield from step.delete(orders, "o-2", key="end"))

    eid = start_workflow(wf)
    rt.settle(lambda: get_execution(eid).is_finished)
    assert get_execution(eid).result is True
    again = rt.client.delete_store_from(
        orders,
        "o-2",
        snapshot=rt.client.get_store(orders, "o-2"),  # a new instance, made by this read
        step_id=StoreStepId(eid, "end"),
    )
    assert again.deleted is True
    rt.client.delete_store(orders, "o-2")
    replayed = rt.client.update_store(
        orders, "o-2", updater=lambda d: d["items"].append("twice"), step_id=StoreStepId(eid, "pay")
    )
    assert replayed == StoreUpdateResult({"items": ["paid"]}, 0, 1)
    assert not exists(rt, orders, "o-2")


def test_a_delete_wakes_the_executions_waiting_on_the_store(rt: Runtime) -> None:
    inbox = rt.define()

    @rt.workflow
    def waiter(step: Step) -> Any:
        return (yield from step.take(inbox, "i", first, pop_first))

    @rt.workflow
    def deleter(step: Step) -> Any:
        return (yield from step.delete(inbox, "i"))

    waiting = start_workflow(waiter)
    rt.pump()
    assert get_execution(waiting).status == "waiting"
    done = start_workflow(deleter)
    rt.settle(lambda: get_execution(done).is_finished)
    assert get_execution(done).result is True
    rt.settle()
    # Woken, it took again: the store is back (a new instance) and it waits on that.
    assert get_execution(waiting).status == "waiting"
    rt.client.update_store(inbox, "i", updater=lambda d: d["items"].append("hello"))
    rt.settle(lambda: get_execution(waiting).is_finished)
    assert get_execution(waiting).result == "hello"


def test_the_per_entity_pattern_cleans_up_both_stores(rt: Runtime) -> None:
    """``take_any`` over ``payments/<order>`` and ``cancellations/<order>`` creates both
    stores; the workflow deletes both once it has its answer."""
    payments, cancellations = rt.define(), rt.define()

    @rt.workflow
    def order(step: Step, order_id: str) -> Any:
        index, value = yield from step.take_any(
            [
                (payments, order_id, first, pop_first),
                (cancellations, order_id, first, pop_first),
            ]
        )
        yield from step.delete(payments, order_id)
        yield from step.delete(cancellations, order_id)
        return ["paid" if index == 0 else "cancelled", value]

    eids = [start_workflow(order, f"o-{n}") for n in range(3)]
    rt.pump()
    assert all(exists(rt, s, f"o-{n}") for s in (payments, cancellations) for n in range(3))
    for n in range(3):
        store = payments if n % 2 == 0 else cancellations
        rt.client.update_store(store, f"o-{n}", updater=lambda d, n=n: d["items"].append(n))
    rt.settle(lambda: all(get_execution(e).is_finished for e in eids))
    assert [get_execution(e).result for e in eids] == [["paid", 0], ["cancelled", 1], ["paid", 2]]
    assert rt.client.list_stores(payments) == [] and rt.client.list_stores(cancellations) == []


def test_a_delete_whose_record_fails_deletes_nothing(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The heap row commits in the deletion's transaction: a run that loses its lease as
    it records leaves the store, and the run after it deletes it once."""
    if rt.client.__class__.__name__ == "MemoryStoreClient":
        pytest.skip("the in-memory client commits alone; its replay relies on the ledger")
    orders = rt.define()
    rt.client.update_store(orders, "o-3", updater=lambda d: d["items"].append("x"))

    @rt.workflow
    def wf(step: Step) -> Any:
        return (yield from step.delete(orders, "o-3"))

    from yieldstar_django.runtime import context

    real = context.StepContext.record
    fail = [True]

    def record(self: Any, *args: Any, **kwargs: Any) -> None:
        if fail and self.kind.name == "delete":
            fail.clear()
            raise LeaseLost(self.execution_id)
        real(self, *args, **kwargs)

    monkeypatch.setattr(context.StepContext, "record", record)
    eid = start_workflow(wf)
    rt.pump()
    assert not fail, "the record was tried"
    assert StoreInstance.objects.filter(name=orders.name, store_id="o-3").exists()
    assert not AppliedStep.objects.filter(execution_id=eid).exists()
    assert not ExecutionStep.objects.filter(execution_id=eid).exists()
    from yieldstar_django.runtime import executions

    executions.run_execution(eid)  # the execution runs again later: run it now
    rt.settle(lambda: get_execution(eid).is_finished)
    assert get_execution(eid).result is True
    assert not exists(rt, orders, "o-3")
    assert AppliedStep.objects.filter(execution_id=eid, operation="delete").count() == 1
    assert not Waiter.objects.filter(execution_id=eid).exists()


def test_delete_checks_its_arguments_before_any_step(rt: Runtime) -> None:
    with pytest.raises(TypeError, match="StoreDefinition"):
        next(Step("e", "w").delete("orders", "o-1"))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        next(Step("e", "w").delete(rt.define(), "x" * 300))
