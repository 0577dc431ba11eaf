"""Idle stores: ``define_store(..., retention=)`` applied by ``prune_idle_stores`` and
``yieldstar_prune``, conditional on no change, no waiter and no held lease, under races."""

from __future__ import annotations

import io
import random
import threading
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, connections
from django.utils import timezone

from tests.polling import HANG_SECONDS, join_or_fail
from yieldstar_django.core.definition import StoreDefinition, define_store
from yieldstar_django.core.results import StoreStepId, StoreWaiter
from yieldstar_django.models import (
    AppliedStep,
    ClaimDelivery,
    StoreInstance,
    Waiter,
    WakeIntent,
)
from yieldstar_django.retention import prune_idle_stores
from yieldstar_django.runtime import Step, get_execution, start_workflow
from yieldstar_django.runtime.claim_leases import expire_due

from .conftest import Runtime
from .test_claim_leases import first, later, pop_first


@pytest.fixture
def db_rt(rt: Runtime, client_kind: str) -> Runtime:
    if client_kind != "db":
        pytest.skip("retention deletes the database's rows; the memory client keeps its own")
    return rt


def per_entity(rt: Runtime, hours: float = 1, **options: Any) -> StoreDefinition:
    name = rt.name("entity")
    rt.stores.append(name)
    return define_store(
        name,
        None,
        initial=lambda id: {"items": []},
        retention=timedelta(hours=hours),
        **options,
    )


def ids(rt: Runtime, store: StoreDefinition) -> list[str]:
    return rt.client.list_stores(store)


def hours_later(hours: float) -> Any:
    return timezone.now() + timedelta(hours=hours)


def test_stores_untouched_for_their_retention_are_deleted(db_rt: Runtime) -> None:
    rt = db_rt
    payments = per_entity(rt)
    kept = rt.define()  # no retention: never pruned
    for n in range(5):
        rt.client.update_store(payments, f"o-{n}", updater=lambda d: d["items"].append(1))
        rt.client.get_store(kept, f"o-{n}")
    assert prune_idle_stores()[payments.name] == 0, "touched just now"
    deleted = prune_idle_stores(now=hours_later(2), batch_size=2)
    assert deleted == {payments.name: 5}
    assert ids(rt, payments) == [] and len(ids(rt, kept)) == 5


def test_a_store_with_a_waiter_or_a_held_lease_is_kept(db_rt: Runtime) -> None:
    rt = db_rt
    inbox = per_entity(rt)
    queue = per_entity(rt, release=lambda draft, value: draft["items"].append(value))
    rt.client.update_store(queue, "q", updater=lambda d: d["items"].append("job"))

    @rt.workflow
    def waits(step: Step) -> Any:
        return (yield from step.take(inbox, "i", first, pop_first))

    @rt.workflow
    def holds(step: Step) -> Any:
        lease = yield from step.take(queue, "q", first, pop_first, lease=30)
        yield from step.sleep(3600)
        return lease.value

    waiting = start_workflow(waits)
    start_workflow(holds)
    rt.pump()
    assert prune_idle_stores(now=hours_later(2)) == {inbox.name: 0, queue.name: 0}
    assert ids(rt, inbox) == ["i"] and ids(rt, queue) == ["q"]
    rt.client.update_store(inbox, "i", updater=lambda d: d["items"].append("hi"))
    rt.settle(lambda: get_execution(waiting).is_finished)
    assert expire_due(now=later(), client=rt.client) == 1  # the lease ends
    assert not Waiter.objects.exists()
    assert prune_idle_stores(now=hours_later(2)) == {inbox.name: 1, queue.name: 1}


def test_a_pruned_store_keeps_its_receipts_and_starts_again_from_initial(
    db_rt: Runtime,
) -> None:
    rt = db_rt
    store = per_entity(rt)
    step_id = StoreStepId("some-execution", "pay")
    rt.client.update_store(store, "o", updater=lambda d: d["items"].append("paid"), step_id=step_id)
    assert prune_idle_stores(now=hours_later(2)) == {store.name: 1}
    assert AppliedStep.objects.filter(store_name=store.name, step_key="pay").count() == 1
    replay = rt.client.update_store(
        store, "o", updater=lambda d: d["items"].append("again"), step_id=step_id
    )
    assert replay.state == {"items": ["paid"]}, "the recorded result, not applied again"
    assert ids(rt, store) == []
    assert rt.client.get_store(store, "o").state == {"items": []}


def test_the_delivery_counts_of_a_pruned_store_go_with_it(db_rt: Runtime) -> None:
    rt = db_rt
    store = per_entity(
        rt,
        release=lambda draft, value: draft["items"].append(value),
        max_deliveries=3,
        dead_letter=lambda draft, value: None,
    )
    rt.client.update_store(store, "q", updater=lambda d: d["items"].append("job"))

    @rt.workflow
    def holds(step: Step) -> Any:
        lease = yield from step.take(store, "q", first, pop_first, lease=5)
        yield from step.sleep(3600)
        return lease.value

    start_workflow(holds)
    rt.pump()
    assert expire_due(now=later(), client=rt.client) == 1
    assert ClaimDelivery.objects.filter(store_name=store.name).count() == 1
    assert prune_idle_stores(now=hours_later(2)) == {store.name: 1}
    assert not ClaimDelivery.objects.filter(store_name=store.name).exists()


def test_yieldstar_prune_deletes_idle_stores_unless_told_to_keep_them(db_rt: Runtime) -> None:
    rt = db_rt
    store = per_entity(rt)
    for n in range(3):
        rt.client.get_store(store, f"o-{n}")
    StoreInstance.objects.filter(name=store.name, store_id__in=["o-0", "o-1"]).update(
        updated_at=timezone.now() - timedelta(hours=2)
    )
    out = io.StringIO()
    call_command("yieldstar_prune", "--keep-idle-stores", stdout=out)
    assert "idle store" not in out.getvalue()
    assert len(ids(rt, store)) == 3
    call_command("yieldstar_prune", stdout=out)
    assert f"deleted 2 idle store(s) (2 of {store.name})" in out.getvalue()
    assert ids(rt, store) == ["o-2"]


def test_prune_idle_stores_checks_its_batch_size() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        prune_idle_stores(batch_size=0)


def test_pruning_races_registrations_and_writes_without_losing_either(db_rt: Runtime) -> None:
    """A pruner deletes idle stores while, on other connections, waiters register on them
    and writers change them, in the same order. Every store the pruner deleted was unused
    when it did: a waiter that came first kept its store (and stays registered on it), one
    that came after found the store gone and woke its execution at once; a write that came
    first kept its store, one that came after created the store again. Nothing raises."""
    if connection.vendor != "postgresql":
        pytest.skip("racing connections need PostgreSQL (SQLite runs one writer at a time)")
    rt = db_rt
    store = per_entity(rt)
    count = 60
    seen = {}
    for n in range(count):
        seen[n] = rt.client.get_store(store, f"s{n:03}")
    StoreInstance.objects.filter(name=store.name).update(
        updated_at=timezone.now() - timedelta(hours=2)
    )
    barrier = threading.Barrier(3, timeout=HANG_SECONDS)
    errors: list[BaseException] = []
    pruned: list[int] = []

    def pruner() -> None:
        try:
            barrier.wait()
            for _ in range(count // 4):
                pruned.append(prune_idle_stores(batch_size=2)[store.name])
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    def registrar() -> None:
        rng = random.Random(1)
        try:
            barrier.wait()
            for n in range(0, count, 2):
                if rng.random() < 0.5:
                    threading.Event().wait(rng.random() * 0.003)
                rt.client.register_waiter(
                    StoreWaiter(
                        "wf",
                        f"e{n}",
                        "take",
                        store.name,
                        f"s{n:03}",
                        seen[n].instance_id,
                        seen[n].version,
                        [("items",)],
                    )
                )
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    def writer() -> None:
        rng = random.Random(2)
        try:
            barrier.wait()
            for n in range(1, count, 2):
                if rng.random() < 0.5:
                    threading.Event().wait(rng.random() * 0.003)
                rt.client.update_store(store, f"s{n:03}", updater=lambda d: d["items"].append("w"))
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=f) for f in (pruner, registrar, writer)]
    for thread in threads:
        thread.start()
    join_or_fail(*threads, what="the pruner, the registrar and the writer")
    assert not errors, errors
    rows = {
        s.store_id: s
        for s in StoreInstance.objects.filter(name=store.name)  # what is left
    }
    for n in range(0, count, 2):
        waiter = Waiter.objects.filter(execution_id=f"e{n}").first()
        woken = WakeIntent.objects.filter(execution_id=f"e{n}").exists()
        if f"s{n:03}" in rows:
            assert waiter is not None and waiter.store_id == rows[f"s{n:03}"].pk, n
        else:
            assert waiter is None and woken, f"the waiter of s{n:03} was lost"
    for n in range(1, count, 2):
        row = rows.get(f"s{n:03}")
        assert row is not None and row.value == {"items": ["w"]}, f"the write to s{n:03}"
    assert sum(pruned) == count - len(rows) + sum(
        1 for n in range(1, count, 2) if rows[f"s{n:03}"].instance_id != seen[n].instance_id
    )
