"""Dead letters: ``define_store(..., max_deliveries=, dead_letter=, requeue=)``, the
delivery count of leased claims, and requeues, with both clients and racing processes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection

from tests.shared.fixtures import Spawn
from yieldstar_django.core.definition import StoreDefinition, define_store
from yieldstar_django.models import ClaimDelivery, ClaimLeaseRecord, Execution
from yieldstar_django.runtime import Step, get_execution, start_workflow
from yieldstar_django.runtime.claim_leases import expire_due, requeue, value_digest

from .conftest import Runtime
from .test_claim_leases import first, later, pop_first


def put_back(draft: Any, value: Any) -> None:
    draft["items"].append(value)


def bury(draft: Any, value: Any) -> None:
    draft["dead"].append(value)


def unbury(draft: Any, value: Any) -> None:
    draft["dead"].remove(value)
    draft["items"].append(value)


def jobs(rt: Runtime, items: list[str], max_deliveries: int = 2) -> StoreDefinition:
    name = rt.name("jobs")
    rt.stores.append(name)
    return define_store(
        name,
        None,
        initial=lambda id: {"items": list(items), "dead": []},
        release=put_back,
        max_deliveries=max_deliveries,
        dead_letter=bury,
        requeue=unbury,
    )


def contents(rt: Runtime, store: StoreDefinition) -> dict[str, Any]:
    return dict(rt.client.get_store(store, "q").state)


def holder(rt: Runtime, store: StoreDefinition) -> Any:
    """A workflow that takes from ``store`` under a lease and never finishes with it."""

    @rt.workflow
    def wf(step: Step) -> Any:
        lease = yield from step.take(store, "q", first, pop_first, lease=5)
        yield from step.sleep(3600)
        return (yield from step.complete(lease))

    return wf


def take_once(rt: Runtime, wf: Any) -> ClaimLeaseRecord:
    eid = start_workflow(wf)
    rt.pump()
    return ClaimLeaseRecord.objects.get(execution_id=eid)


def test_a_value_whose_lease_expired_max_deliveries_times_goes_to_the_dead_letter(
    rt: Runtime,
) -> None:
    q = jobs(rt, ["job-1"], max_deliveries=3)
    wf = holder(rt, q)
    for delivery in (1, 2):
        lease = take_once(rt, wf)
        assert lease.delivery == delivery
        assert expire_due(now=later(), client=rt.client) == 1
        assert ClaimLeaseRecord.objects.get(pk=lease.pk).state == "expired"
        assert contents(rt, q) == {"items": ["job-1"], "dead": []}
    last = take_once(rt, wf)
    assert last.delivery == 3
    assert expire_due(now=later(), client=rt.client) == 1
    assert contents(rt, q) == {"items": [], "dead": ["job-1"]}
    assert ClaimLeaseRecord.objects.get(pk=last.pk).state == "dead_lettered"
    assert not ClaimDelivery.objects.exists(), "the value left the queue: its count goes"
    assert expire_due(now=later(), client=rt.client) == 0


def test_a_completed_value_starts_its_count_afresh(rt: Runtime) -> None:
    q = jobs(rt, ["job-1"])
    wf = holder(rt, q)
    take_once(rt, wf)
    assert expire_due(now=later(), client=rt.client) == 1
    assert ClaimDelivery.objects.get().expiries == 1

    @rt.workflow
    def finisher(step: Step) -> Any:
        lease = yield from step.take(q, "q", first, pop_first, lease=30)
        return [lease.value, (yield from step.complete(lease))]

    eid = start_workflow(finisher)
    rt.settle(lambda: get_execution(eid).is_finished)
    assert get_execution(eid).result == ["job-1", True]
    assert ClaimLeaseRecord.objects.get(execution_id=eid).delivery == 2
    assert not ClaimDelivery.objects.exists()
    rt.client.update_store(q, "q", updater=lambda d: d["items"].append("job-1"))
    assert take_once(rt, wf).delivery == 1


def test_a_release_does_not_count(rt: Runtime) -> None:
    q = jobs(rt, ["job-1"], max_deliveries=1)

    @rt.workflow
    def releaser(step: Step) -> Any:
        lease = yield from step.take(q, "q", first, pop_first, lease=30)
        return (yield from step.release(lease))

    for _ in range(3):
        eid = start_workflow(releaser)
        rt.settle(lambda eid=eid: get_execution(eid).is_finished)
        assert get_execution(eid).result is True
    assert contents(rt, q) == {"items": ["job-1"], "dead": []}
    assert not ClaimDelivery.objects.exists()


def test_requeue_takes_a_dead_letter_back_once_and_its_count_restarts(rt: Runtime) -> None:
    q = jobs(rt, ["job-1"], max_deliveries=1)
    wf = holder(rt, q)
    lease = take_once(rt, wf)
    assert expire_due(now=later(), client=rt.client) == 1
    assert contents(rt, q) == {"items": [], "dead": ["job-1"]}
    version = rt.client.get_store(q, "q").version
    assert requeue([lease.pk], client=rt.client) == 1
    assert requeue([lease.pk], client=rt.client) == 0
    assert contents(rt, q) == {"items": ["job-1"], "dead": []}
    assert rt.client.get_store(q, "q").version == version + 1
    assert ClaimLeaseRecord.objects.get(pk=lease.pk).state == "requeued"
    assert take_once(rt, wf).delivery == 1


def test_a_requeue_whose_callback_fails_leaves_the_dead_letter(rt: Runtime) -> None:
    q = jobs(rt, ["job-1"], max_deliveries=1)
    lease = take_once(rt, holder(rt, q))
    assert expire_due(now=later(), client=rt.client) == 1
    rt.client.update_store(q, "q", updater=lambda d: d["dead"].clear())  # not there any more
    assert requeue([lease.pk], client=rt.client) == 0  # ``remove`` raised: logged
    assert ClaimLeaseRecord.objects.get(pk=lease.pk).state == "dead_lettered"
    assert contents(rt, q) == {"items": [], "dead": []}


def test_a_dead_letter_of_a_store_deleted_since_is_not_requeued(rt: Runtime) -> None:
    q = jobs(rt, ["job-1"], max_deliveries=1)
    lease = take_once(rt, holder(rt, q))
    assert expire_due(now=later(), client=rt.client) == 1
    rt.client.delete_store(q, "q")
    assert requeue([lease.pk], client=rt.client) == 0
    assert ClaimLeaseRecord.objects.get(pk=lease.pk).state == "dead_lettered"
    assert rt.client.list_stores(q) == [], "nothing was created again"


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"max_deliveries": 2}, TypeError, "go together"),
        ({"dead_letter": bury}, TypeError, "go together"),
        ({"max_deliveries": True, "dead_letter": bury}, TypeError, "must be an int"),
        ({"max_deliveries": 0, "dead_letter": bury}, ValueError, "from 1"),
        ({"max_deliveries": 2**31, "dead_letter": bury}, ValueError, "from 1"),
        ({"max_deliveries": 2, "dead_letter": "bury"}, TypeError, "callable"),
        ({"requeue": unbury}, TypeError, "needs max_deliveries"),
        ({"retention": 3600}, TypeError, "timedelta"),
        ({"retention": timedelta(0)}, ValueError, "positive"),
        ({"retention": timedelta(days=365 * 101)}, ValueError, "100 years"),
    ],
)
def test_define_store_checks_the_dead_letter_and_retention_options(
    options: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        define_store("bad-options", None, initial=lambda id: {}, release=put_back, **options)


def test_max_deliveries_needs_a_release() -> None:
    with pytest.raises(TypeError, match="need"):
        define_store("bad-options", None, initial=lambda id: {}, max_deliveries=1, dead_letter=bury)


# --- racing processes ---------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_racing_sweepers_count_and_dead_letter_each_lease_once(spawn: Spawn) -> None:
    """Four processes expire the same due leases at once, each on its own PostgreSQL
    connection: every lease ends once, a value on its last delivery is dead-lettered once
    (in the dead list once, its count gone), another's expiry is counted once and it is
    back in the queue once; the store changed once per lease."""
    if connection.vendor != "postgresql":
        pytest.skip("racing connections need PostgreSQL (SQLite runs one writer at a time)")
    from tests.shared.workers import dead_letter_store

    store = dead_letter_store("race-dead-letters")
    from yieldstar_django.connector import get_store_client

    client = get_store_client()
    try:
        snapshot = client.get_store(store, "q")
        values = [f"job-{n}" for n in range(8)]
        for n, value in enumerate(values):
            Execution.objects.create(id=f"holder-{n}", workflow_id="w", input_json="{}")
            ClaimLeaseRecord.objects.create(
                id=f"holder-{n}/0",
                execution_id=f"holder-{n}",
                step_key="0",
                store_name=store.name,
                store_id="q",
                instance_id=snapshot.instance_id,
                value_json=f'"{value}"',
                delivery=2 if n % 2 == 0 else 1,  # max_deliveries=2: the even ones are done
                expires_at=later() - timedelta(hours=2),
            )
        ends = spawn("expire_leases", [(connection.alias, store.name)] * 4)
        assert sum(ends) == 8, ends
        after = client.get_store(store, "q")
        assert sorted(after.state["dead"]) == values[0::2]
        assert sorted(after.state["items"]) == values[1::2]
        assert after.version == snapshot.version + 8
        states = dict(ClaimLeaseRecord.objects.values_list("pk", "state"))
        assert states == {
            f"holder-{n}/0": "dead_lettered" if n % 2 == 0 else "expired" for n in range(8)
        }
        counts = dict(ClaimDelivery.objects.values_list("value_digest", "expiries"))
        assert counts == {value_digest(f'"{v}"'): 1 for v in values[1::2]}
    finally:
        from yieldstar_django.core.definition import unregister_store

        unregister_store(store.name)


def test_a_step_keyed_like_a_leases_requeue_is_a_step_key_error(rt: Runtime) -> None:
    """A dead letter of the lease taken by the step keyed "t" is requeued under the ledger
    key "t:requeue": an ``update`` keyed so on the same store would take that key (and the
    requeue would find its "result" there and put nothing back)."""
    q = jobs(rt, ["job-1"], max_deliveries=1)

    @rt.workflow
    def wf(step: Step) -> Any:
        lease = yield from step.take(q, "q", first, pop_first, lease=5, key="t")
        yield from step.update(q, "q", lambda d: d.update(n=1), key="t:requeue")
        return lease.value

    eid = start_workflow(wf)
    rt.settle(lambda: get_execution(eid).is_finished)
    error = get_execution(eid).error
    assert error is not None and error["type"] == "StepKeyError", error
