"""Leased claims: ``take(..., lease=)``, ``complete``, ``release``, expiry, races."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import connection, connections
from django.test import override_settings
from django.utils import timezone

from tests.polling import HANG_SECONDS, join_or_fail, wait_until
from yieldstar_django import clock
from yieldstar_django.core.commits import RetryPolicy
from yieldstar_django.core.definition import StoreDefinition, define_store
from yieldstar_django.core.memory import MemoryStoreClient
from yieldstar_django.models import ClaimLeaseRecord, ClaimLeaseState, ExecutionStep
from yieldstar_django.runtime import ClaimLease, Step, get_execution, start_workflow
from yieldstar_django.runtime.claim_leases import end_lease, expire_due, release_now
from yieldstar_django.testing import advance_time
from yieldstar_django.wakes import run_relay

from .conftest import Runtime


def first(state: Any) -> Any:
    return state["items"][0] if state["items"] else None


def pop_first(draft: Any, selected: Any) -> None:
    draft["items"].pop(0)


def put_back(draft: Any, value: Any) -> None:
    draft["items"].append(value)


def queue(rt: Runtime, items: list[str]) -> StoreDefinition:
    name = rt.name("queue")
    rt.stores.append(name)
    return define_store(name, None, initial=lambda id: {"items": list(items)}, release=put_back)


def state(rt: Runtime, store: StoreDefinition) -> list[str]:
    return list(rt.client.get_store(store, "q").state["items"])


def later() -> Any:
    return timezone.now() + timedelta(hours=1)


def test_complete_keeps_the_claim_and_expiry_then_changes_nothing(rt: Runtime) -> None:
    q = queue(rt, ["job-1"])

    @rt.workflow
    def wf(step: Step) -> Any:
        lease = yield from step.take(q, "q", first, pop_first, lease=30)
        assert isinstance(lease, ClaimLease)
        yield from step.sleep(0.01)  # a replay must rebuild the same lease
        done = yield from step.complete(lease)
        return [lease.value, done]

    eid = start_workflow(wf)
    rt.settle(lambda: get_execution(eid).is_finished)
    assert get_execution(eid).result == ["job-1", True]
    record = ClaimLeaseRecord.objects.get()
    assert record.state == "completed" and record.execution_id == eid
    assert expire_due(now=later(), client=rt.client) == 0
    assert state(rt, q) == []


def test_release_hands_the_value_back_once(rt: Runtime) -> None:
    q = queue(rt, ["job-1"])

    @rt.workflow
    def wf(step: Step) -> Any:
        lease = yield from step.take(q, "q", first, pop_first, lease=30)
        first_release = yield from step.release(lease)
        again = yield from step.release(lease, key="again")
        return [first_release, again]

    eid = start_workflow(wf)
    rt.settle(lambda: get_execution(eid).is_finished)
    assert get_execution(eid).result == [True, False]
    assert state(rt, q) == ["job-1"]
    assert ClaimLeaseRecord.objects.get().state == "released"


def held_until_the_gate_opens(rt: Runtime, q: StoreDefinition) -> tuple[Any, StoreDefinition]:
    """A workflow that takes from ``q`` with a 5 s lease, waits on a gate store until the
    test puts an item in it, then completes the lease; and the gate."""
    gate = rt.define()

    @rt.workflow
    def wf(step: Step) -> Any:
        lease = yield from step.take(q, "q", first, pop_first, lease=5)
        yield from step.take(gate, "g", first)  # stuck until the test opens the gate
        return (yield from step.complete(lease))

    return wf, gate


def test_an_expired_lease_is_handed_back_and_complete_then_says_false(rt: Runtime) -> None:
    q = queue(rt, ["job-1"])
    wf, gate = held_until_the_gate_opens(rt, q)

    eid = start_workflow(wf)
    rt.pump()
    assert state(rt, q) == []
    assert expire_due(client=rt.client) == 0  # not due yet
    assert expire_due(now=later(), client=rt.client) == 1
    assert state(rt, q) == ["job-1"]
    assert expire_due(now=later(), client=rt.client) == 0  # exactly once
    rt.client.update_store(gate, "g", updater=lambda d: d["items"].append("go"))
    rt.settle(lambda: get_execution(eid).is_finished)
    assert get_execution(eid).result is False
    assert state(rt, q) == ["job-1"]


def test_a_leased_take_needs_a_release_callback(rt: Runtime) -> None:
    plain = rt.define()
    with pytest.raises(TypeError, match="release="):
        next(Step("e", "w").take(plain, "q", first, lease=5))
    with pytest.raises(ValueError):
        next(Step("e", "w").take(queue(rt, []), "q", first, lease=0))


def test_racing_expiry_and_release_hand_back_exactly_once(rt: Runtime) -> None:
    """Sweepers and admin releases race on their own PostgreSQL connections: the value is
    handed back once, the store changes once."""
    if rt.client.__class__.__name__ == "MemoryStoreClient" or connection.vendor != "postgresql":
        pytest.skip("needs the database client on PostgreSQL")
    q = queue(rt, ["job-1", "job-2", "job-3"])

    @rt.workflow
    def wf(step: Step) -> Any:
        lease = yield from step.take(q, "q", first, pop_first, lease=5)
        yield from step.sleep(3600)
        return lease.value

    eids = [start_workflow(wf) for _ in range(3)]
    rt.pump()
    assert state(rt, q) == []
    ids = list(ClaimLeaseRecord.objects.values_list("pk", flat=True))
    version = rt.client.get_store(q, "q").version
    barrier = threading.Barrier(6, timeout=HANG_SECONDS)
    ended: list[int] = []

    def sweeper(admin: bool) -> None:
        try:
            barrier.wait()
            if admin:
                ended.append(release_now(ids))
            else:
                ended.append(expire_due(now=later()))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=sweeper, args=(n % 2 == 0,)) for n in range(6)]
    for thread in threads:
        thread.start()
    join_or_fail(*threads, what="the threads")
    assert sum(ended) == 3
    assert sorted(state(rt, q)) == ["job-1", "job-2", "job-3"]
    assert rt.client.get_store(q, "q").version == version + 3
    assert len(eids) == 3


def test_the_relay_hands_back_expired_leases_every_round(rt: Runtime) -> None:
    """The runtime registers the sweep as the relay's upkeep (``AppConfig.ready``)."""
    if rt.client.__class__.__name__ == "MemoryStoreClient":
        pytest.skip("the relay sweeps the database's claim leases, not the memory client's")
    q = queue(rt, ["job-1"])

    @rt.workflow
    def wf(step: Step) -> Any:
        lease = yield from step.take(q, "q", first, pop_first, lease=0.2)
        yield from step.sleep(3600)
        return lease.value

    start_workflow(wf)
    rt.pump()
    assert state(rt, q) == []

    def handed_back() -> bool:
        run_relay(once=True, using=connection.alias)
        return state(rt, q) != []

    wait_until("the relay to hand the expired lease back", handed_back, interval=0.1)
    assert state(rt, q) == ["job-1"]


def test_a_hand_back_whose_release_fails_leaves_the_lease_held(
    rt: Runtime, request: pytest.FixtureRequest
) -> None:
    """``release_now``: "one whose release fails is logged and stays held", so a later
    round hands the value back (with the in-memory client too)."""
    failing = [True]

    def flaky_put_back(draft: Any, value: Any) -> None:
        if failing[0]:
            raise RuntimeError("release is down")
        draft["items"].append(value)

    name = rt.name("queue")
    rt.stores.append(name)
    q = define_store(name, None, initial=lambda id: {"items": ["job-1"]}, release=flaky_put_back)
    wf, _ = held_until_the_gate_opens(rt, q)

    start_workflow(wf)
    rt.pump()
    assert state(rt, q) == []
    assert expire_due(now=later(), client=rt.client) == 0  # the release raised
    assert ClaimLeaseRecord.objects.get().state == "held"
    failing[0] = False
    assert expire_due(now=later(), client=rt.client) == 1
    assert state(rt, q) == ["job-1"]


@pytest.mark.parametrize("action", ["release", "complete"])
@pytest.mark.parametrize("thief_id", ["thief", "holder"])
def test_a_lease_of_another_execution_is_refused(rt: Runtime, action: str, thief_id: str) -> None:
    """``release``/``complete`` given a ``ClaimLease`` that another execution took raise
    ``ValueError`` into the workflow and leave that lease alone: its holder completes it
    and keeps its item. (``thief_id`` "holder" is a prefix of the holder's id, "holder/1",
    so the lease id starts with the thief's id and a "/".) Failed before: the other
    execution's lease was ended (released: its item handed back), and its holder's
    ``complete`` then said ``False``."""
    q = queue(rt, ["job-1"])
    gate = rt.define()

    @rt.workflow
    def holder(step: Step) -> Any:
        lease = yield from step.take(q, "q", first, pop_first, lease=30)
        yield from step.take(gate, "g", first)
        return (yield from step.complete(lease))

    @rt.workflow
    def thief(step: Step, lid: str) -> Any:
        stolen = ClaimLease(lid, q.name, "q", "job-1", 30)
        try:
            yield from (step.release(stolen) if action == "release" else step.complete(stolen))
        except ValueError as exc:
            return str(exc)
        return "ended it"

    eid = start_workflow(holder, execution_id="holder/1")
    rt.pump()
    lid = ClaimLeaseRecord.objects.get().pk
    tid = start_workflow(thief, lid, execution_id=thief_id)
    rt.settle(lambda: get_execution(tid).is_finished)
    assert "another execution" in str(get_execution(tid).result), get_execution(tid).result
    assert ClaimLeaseRecord.objects.get().state == "held"
    rt.client.update_store(gate, "g", updater=lambda d: d["items"].append("go"))
    rt.settle(lambda: get_execution(eid).is_finished)
    assert get_execution(eid).result is True
    assert state(rt, q) == []


def test_a_step_keyed_like_a_leases_hand_back_is_a_step_key_error(rt: Runtime) -> None:
    """A lease taken by the step keyed "t" is handed back under the ledger key
    "t:release": an ``update`` keyed "t:release" on the same store would take that key,
    and the hand-back would then find its "result" in the ledger and apply nothing. The
    execution fails with ``StepKeyError`` at the update instead, and the expired lease's
    item comes back. Failed before: the update ran, and the expiry marked the lease
    ``expired`` without handing the item back (on the database client; the in-memory
    path left it held for ever)."""
    q = queue(rt, ["job-1"])

    @rt.workflow
    def wf(step: Step) -> Any:
        lease = yield from step.take(q, "q", first, pop_first, lease=5, key="t")
        yield from step.update(q, "q", lambda d: d.update(n=1), key="t:release")
        yield from step.sleep(3600)
        return (yield from step.complete(lease))

    eid = start_workflow(wf)
    rt.settle(lambda: get_execution(eid).status in ("sleeping", "failed"))
    error = get_execution(eid).error
    assert error is not None and error["type"] == "StepKeyError", get_execution(eid).status
    assert expire_due(now=later(), client=rt.client) == 1
    assert state(rt, q) == ["job-1"]


def test_a_lease_taken_by_a_step_with_a_key_of_255_characters_is_handed_back(
    rt: Runtime,
) -> None:
    """Step keys may be 255 characters long; the hand-back's ledger key is derived from
    the take's key and must fit that too. Failed before (database client): it was the
    take's key plus ":release", 263 characters, which the ledger refuses, so the expired
    lease's release failed on every round and the item never came back."""
    q = queue(rt, ["job-1"])

    @rt.workflow
    def wf(step: Step) -> Any:
        lease = yield from step.take(q, "q", first, pop_first, lease=5, key="k" * 255)
        yield from step.sleep(3600)
        return lease.value

    start_workflow(wf)
    rt.pump()
    assert state(rt, q) == []
    assert expire_due(now=later(), client=rt.client) == 1
    assert state(rt, q) == ["job-1"]
    assert ClaimLeaseRecord.objects.get().state == "expired"


def test_complete_and_release_twice_end_the_lease_once(rt: Runtime) -> None:
    """A lease ends once: a second ``complete`` and a ``release`` after it say ``False``
    and hand nothing back."""
    q = queue(rt, ["job-1"])

    @rt.workflow
    def wf(step: Step) -> Any:
        lease = yield from step.take(q, "q", first, pop_first, lease=30)
        once = yield from step.complete(lease)
        twice = yield from step.complete(lease, key="twice")
        released = yield from step.release(lease, key="released")
        return [once, twice, released]

    eid = start_workflow(wf)
    rt.settle(lambda: get_execution(eid).is_finished)
    assert get_execution(eid).result == [True, False, False]
    assert state(rt, q) == []
    assert ClaimLeaseRecord.objects.get().state == "completed"


def test_a_release_callback_that_fails_or_returns_no_durable_state_changes_nothing(
    rt: Runtime,
) -> None:
    """``release`` raising, or making a state that is not a durable value, is raised into
    the workflow at ``step.release`` (as recorded), and the lease stays held, so the
    expiry hands the value back once the callback works."""
    mode = ["raise"]

    def release(draft: Any, value: Any) -> Any:
        if mode[0] == "raise":
            raise RuntimeError("release is down")
        if mode[0] == "set":
            return {"items": {value}}  # a set: not a durable value
        draft["items"].append(value)
        return None

    name = rt.name("queue")
    rt.stores.append(name)
    q = define_store(name, None, initial=lambda id: {"items": ["job-1"]}, release=release)

    @rt.workflow
    def wf(step: Step) -> Any:
        lease = yield from step.take(q, "q", first, pop_first, lease=30)
        errors = []
        for attempt in ("a", "b"):
            try:
                yield from step.release(lease, key=attempt)
            except Exception as exc:
                errors.append(type(exc).__name__)
            mode[0] = "set"
        yield from step.sleep(3600)
        return errors

    eid = start_workflow(wf)
    rt.pump()
    assert get_execution(eid).status == "sleeping"
    steps = rt.steps(eid)
    assert steps["a"].status == steps["b"].status == "failed"
    assert steps["a"].error["type"] == "builtins:RuntimeError"
    assert steps["b"].error["type"].endswith("WorkflowValueError")
    assert ClaimLeaseRecord.objects.get().state == "held"
    assert state(rt, q) == []
    mode[0] = "append"
    assert expire_due(now=later(), client=rt.client) == 1
    assert state(rt, q) == ["job-1"]


def test_a_cancelled_holder_s_lease_is_handed_back_on_expiry(rt: Runtime) -> None:
    """Cancelling an execution that holds a lease leaves the lease held (its work may be
    under way elsewhere) and removes its waiters; the expiry hands the value back once."""
    from yieldstar_django.models import Waiter
    from yieldstar_django.runtime import cancel_execution

    q = queue(rt, ["job-1"])
    wf, gate = held_until_the_gate_opens(rt, q)
    eid = start_workflow(wf)
    rt.pump()
    assert cancel_execution(eid)
    assert not Waiter.objects.filter(execution_id=eid).exists()
    assert ClaimLeaseRecord.objects.get().state == "held"
    assert expire_due(now=later(), client=rt.client) == 1
    assert expire_due(now=later(), client=rt.client) == 0
    rt.client.update_store(gate, "g", updater=lambda d: d["items"].append("go"))
    rt.settle()
    assert get_execution(eid).status == "cancelled"
    assert state(rt, q) == ["job-1"]


def on_postgresql(rt: Runtime) -> None:
    if rt.client.__class__.__name__ == "MemoryStoreClient" or connection.vendor != "postgresql":
        pytest.skip("needs the database client on PostgreSQL")


def test_a_cancel_racing_a_leased_take_leaves_the_item_or_the_lease(rt: Runtime) -> None:
    """A run's leased take is under way (its claim computed, not committed) when another
    connection cancels the execution: the claim's commit is fenced by the execution's
    lease, so it rolls back whole, and the item stays in the store with no lease."""
    on_postgresql(rt)
    from yieldstar_django.runtime import cancel_execution
    from yieldstar_django.runtime.executions import run_execution

    q = queue(rt, ["job-1"])
    claiming, cancelled = threading.Event(), threading.Event()

    def slow_pop(draft: Any, selected: Any) -> None:
        claiming.set()
        assert cancelled.wait(HANG_SECONDS), "the test never cancelled the execution"
        draft["items"].pop(0)

    @rt.workflow
    def wf(step: Step) -> Any:
        lease = yield from step.take(q, "q", first, slow_pop, lease=30)
        return lease.value

    eid = start_workflow(wf)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            run_execution(eid)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    runner = threading.Thread(target=run)
    runner.start()
    assert claiming.wait(HANG_SECONDS)
    assert cancel_execution(eid)
    cancelled.set()
    join_or_fail(runner, what="the runner")
    assert not errors, errors
    assert get_execution(eid).status == "cancelled"
    assert state(rt, q) == ["job-1"]
    assert not ClaimLeaseRecord.objects.exists()


def test_complete_racing_the_expiry_ends_the_lease_once(rt: Runtime) -> None:
    """Each holder completes its lease while a sweeper on another PostgreSQL connection
    expires it, started together (the sweeper a little later each round, so either may
    win): each lease ends once, and exactly the values whose ``complete`` said ``False``
    are back in the store, once each."""
    on_postgresql(rt)
    from yieldstar_django.models import ClaimLeaseState
    from yieldstar_django.runtime.executions import run_execution

    jobs = [f"job-{n}" for n in range(8)]
    q = queue(rt, jobs)
    wf, gate = held_until_the_gate_opens(rt, q)
    eids = [start_workflow(wf) for _ in jobs]
    rt.pump()
    assert state(rt, q) == []
    version = rt.client.get_store(q, "q").version
    leases = {r.execution_id: r.pk for r in ClaimLeaseRecord.objects.all()}
    rt.client.update_store(gate, "g", updater=lambda d: d["items"].append("go"))
    barrier = threading.Barrier(2, timeout=HANG_SECONDS)
    errors: list[BaseException] = []
    expired: list[int] = []

    def holder() -> None:
        try:
            for eid in eids:
                barrier.wait()
                run_execution(eid)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    def sweeper() -> None:
        try:
            for n, eid in enumerate(eids):
                barrier.wait()
                time.sleep(0.001 * n)
                expired.append(release_now([leases[eid]], state=ClaimLeaseState.EXPIRED))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=holder), threading.Thread(target=sweeper)]
    for thread in threads:
        thread.start()
    join_or_fail(*threads, what="the threads")
    assert not errors, errors
    rt.settle(lambda: all(get_execution(e).is_finished for e in eids))
    results = {e: get_execution(e).result for e in eids}
    records = {r.execution_id: r for r in ClaimLeaseRecord.objects.all()}
    for eid, completed in results.items():
        assert records[eid].state == ("completed" if completed else "expired"), results
    handed_back = sorted(records[e].value for e, completed in results.items() if not completed)
    assert sorted(state(rt, q)) == handed_back
    assert sum(expired) == len(handed_back)
    assert rt.client.get_store(q, "q").version == version + len(handed_back)


def test_leases_whose_release_fails_do_not_hold_back_the_others(rt: Runtime) -> None:
    """The sweep hands back at most ``limit`` leases a round, the longest due first; one
    whose release fails stays held and is tried again. As many failing ones as ``limit``,
    due before a good one, must not keep that one from ever being handed back: each round
    goes on after the leases the one before tried. Failed before: every round tried the
    same failing ones, and the good lease stayed held for ever."""
    broken_name = rt.name("queue")
    rt.stores.append(broken_name)

    def broken(draft: Any, value: Any) -> None:
        raise RuntimeError("release is down")

    bad = define_store(
        broken_name, None, initial=lambda id: {"items": ["b-1", "b-2"]}, release=broken
    )
    good = queue(rt, ["job-1"])

    @rt.workflow
    def wf(step: Step, store: str) -> Any:
        q = bad if store == "bad" else good
        lease = yield from step.take(q, "q", first, pop_first, lease=5)
        yield from step.sleep(3600)
        return lease.value

    for store in ("bad", "bad", "good"):  # the good lease is due last
        start_workflow(wf, store)
        rt.pump()
    assert state(rt, good) == []
    for _ in range(3):
        expire_due(now=later(), client=rt.client, limit=2)
    assert state(rt, good) == ["job-1"]
    assert ClaimLeaseRecord.objects.filter(state="held").count() == 2


def gated_lease_length(rt: Runtime, q: StoreDefinition, seconds: list[float]) -> tuple[Any, Any]:
    """A workflow that takes from ``q`` with a lease of ``seconds[0]``, waits on a gate
    store, then returns the lease's ``seconds`` (what it would plan its work by); and the
    gate. Changing ``seconds[0]`` while it waits is a deploy that changed ``lease=``."""
    gate = rt.define()

    @rt.workflow
    def wf(step: Step) -> Any:
        lease = yield from step.take(q, "q", first, pop_first, lease=seconds[0], key="t")
        yield from step.take(gate, "g", first)
        return lease.seconds

    return wf, gate


def test_a_replayed_leased_take_returns_the_lease_it_recorded(rt: Runtime) -> None:
    """A deploy changes ``lease=30`` to ``lease=600`` while an execution holds a 30 s
    lease: its replays hand the workflow the lease the database holds, 30 s, as its first
    run saw. Failed before: the replay built the ``ClaimLease`` from the new code,
    ``seconds=600``, so a workflow planning by it believed it held the item for ten
    minutes while the sweep would hand it back after 30 s (and the first run and the
    replays saw different values)."""
    q = queue(rt, ["job-1"])
    seconds = [30.0]
    wf, gate = gated_lease_length(rt, q, seconds)

    eid = start_workflow(wf)
    rt.pump()
    assert get_execution(eid).status == "waiting"
    seconds[0] = 600.0  # the deploy
    rt.client.update_store(gate, "g", updater=lambda d: d["items"].append("go"))
    rt.settle(lambda: get_execution(eid).is_finished)
    assert get_execution(eid).result == 30.0
    record = ClaimLeaseRecord.objects.get()
    taken = rt.steps(eid)["t"]
    assert taken.recorded_at is not None
    assert record.expires_at - taken.recorded_at == timedelta(seconds=30)
    assert taken.wake_at == record.expires_at  # the heap row carries the lease's expiry


def test_a_leased_take_recorded_by_the_previous_release_still_replays(rt: Runtime) -> None:
    """A heap row of a leased take written by the previous release holds only the
    selected value (no ``wake_at``): it replays, with the lease length of the code (the
    only one known), as that release did."""
    q = queue(rt, ["job-1"])
    seconds = [30.0]
    wf, gate = gated_lease_length(rt, q, seconds)

    eid = start_workflow(wf)
    rt.pump()
    ExecutionStep.objects.filter(execution_id=eid, step_key="t").update(wake_at=None)
    seconds[0] = 45.0
    rt.client.update_store(gate, "g", updater=lambda d: d["items"].append("go"))
    rt.settle(lambda: get_execution(eid).is_finished)
    assert get_execution(eid).status == "completed"
    assert get_execution(eid).result == 45.0


def held_lease(rt: Runtime, q: StoreDefinition) -> str:
    """Start a workflow that takes from ``q`` with a 30 s lease and sleeps an hour; the
    id of its held lease."""

    @rt.workflow
    def wf(step: Step) -> Any:
        lease = yield from step.take(q, "q", first, pop_first, lease=30)
        yield from step.sleep(3600)
        return lease.value

    start_workflow(wf)
    rt.pump()
    record = ClaimLeaseRecord.objects.get()
    assert record.state == "held"
    return record.id


def test_a_release_whose_record_fails_ends_nothing_and_hands_nothing_back(rt: Runtime) -> None:
    """A release is one commit: the lease's end, the hand-back and the step's record
    (``also``) commit together or not at all, with either client. Failed before on the
    in-memory client, which ended the lease, then handed the value back, then recorded
    the step, each on its own: a record that failed left the lease released and the value
    back with no step saying so, and the step's retry answered ``False`` ("had already
    ended") for the release it made itself."""
    q = queue(rt, ["job-1"])
    lease = held_lease(rt, q)

    def fails(ended: bool) -> None:
        raise RuntimeError("the step's record failed")

    with pytest.raises(RuntimeError, match="record failed"):
        end_lease(lease, ClaimLeaseState.RELEASED, rt.client, also=fails)
    assert ClaimLeaseRecord.objects.get().state == "held"
    assert state(rt, q) == []
    recorded: list[bool] = []
    assert end_lease(lease, ClaimLeaseState.RELEASED, rt.client, also=recorded.append) is True
    assert recorded == [True]
    assert ClaimLeaseRecord.objects.get().state == "released"
    assert state(rt, q) == ["job-1"]


def test_a_complete_while_a_release_runs_its_callback_wins_with_either_client(
    rt: Runtime,
) -> None:
    """The lease leaves ``held`` in the commit of the hand-back, not before the release's
    callback runs: a ``complete`` made while it runs (by another process, say) ends the
    lease and keeps the claim, and the release then hands nothing back and answers
    ``False``. Failed before on the in-memory client, which ended the lease before the
    callback: the ``complete`` answered ``False`` ("expired and handed back") while the
    value was still out, so with a callback that then failed the lease went back to
    ``held``, leaving it twice."""
    completes: list[bool] = []
    lease_ids: list[str] = []

    def put_back_after_a_complete(draft: Any, value: Any) -> None:
        if not completes:
            completes.append(end_lease(lease_ids[0], ClaimLeaseState.COMPLETED, rt.client))
        draft["items"].append(value)

    name = rt.name("queue")
    rt.stores.append(name)
    q = define_store(
        name, None, initial=lambda id: {"items": ["job-1"]}, release=put_back_after_a_complete
    )
    lease_ids.append(held_lease(rt, q))

    assert end_lease(lease_ids[0], ClaimLeaseState.RELEASED, rt.client) is False
    assert completes == [True]
    assert ClaimLeaseRecord.objects.get().state == "completed"
    assert state(rt, q) == []


def test_a_release_that_loses_its_races_retries_like_take_and_update(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hand-back that reaches the compare-and-swap cap (``CAS_MAX_ATTEMPTS`` = 1 here;
    another connection writes the store while ``release`` runs, the first time) suspends
    the execution (``retrying``) and runs again a second later, as ``take`` and ``update``
    do: the step records no error, the lease stays held until the retry hands the value
    back, once."""
    bumped: list[str] = []
    name = rt.name("queue")
    rt.stores.append(name)

    def racing_put_back(draft: Any, value: Any) -> None:
        if not bumped:  # another writer commits first: this hand-back's commit loses
            bumped.append("bump")
            writer = threading.Thread(target=lambda: bump(q))
            writer.start()
            join_or_fail(writer, what="the writer")
        draft["items"].append(value)

    def bump(store: StoreDefinition) -> None:
        try:
            rt.client.update_store(store, "q", updater=lambda d: d["items"].append("bump"))
        finally:
            connections.close_all()

    q = define_store(name, None, initial=lambda id: {"items": ["job-1"]}, release=racing_put_back)

    @rt.workflow
    def wf(step: Step) -> Any:
        lease = yield from step.take(q, "q", first, pop_first, lease=30)
        return (yield from step.release(lease))

    tight = {**django_settings.YIELDSTAR, "CAS_MAX_ATTEMPTS": 1, "CAS_QUEUE_AFTER": 0}
    if isinstance(rt.client, MemoryStoreClient):  # its policy is its own, not the settings'
        monkeypatch.setattr(rt.client, "_retry", RetryPolicy(max_attempts=1, queue_after=0))
    try:
        with override_settings(YIELDSTAR=tight):
            eid = start_workflow(wf)
            rt.pump()
            execution = get_execution(eid)
            assert execution.status == "retrying", (execution.status, execution.error)
            assert bumped == ["bump"], "the hand-back lost its race"
            assert ClaimLeaseRecord.objects.get().state == "held"
            assert [s.status for s in ExecutionStep.objects.filter(execution_id=eid)] == [
                "completed"
            ], "only the take is recorded"
            advance_time(2)  # past the contention retry's timer
            rt.settle(lambda: get_execution(eid).is_finished)
    finally:
        clock.reset()
    assert get_execution(eid).result is True
    assert ClaimLeaseRecord.objects.get().state == "released"
    assert state(rt, q) == ["bump", "job-1"]


def released_by_the_holder(rt: Runtime, q: StoreDefinition, gate: StoreDefinition) -> str:
    """Start a workflow that takes from ``q`` with a 30 s lease, waits on ``gate`` and
    then releases the lease (returning what ``release`` said); its execution id."""

    @rt.workflow
    def wf(step: Step) -> Any:
        lease = yield from step.take(q, "q", first, pop_first, lease=30)
        yield from step.take(gate, "g", first)
        return (yield from step.release(lease))

    eid = start_workflow(wf)
    rt.pump()
    assert ClaimLeaseRecord.objects.get().state == "held"
    return eid


@pytest.mark.parametrize("recreated", [False, True], ids=["deleted", "recreated"])
@pytest.mark.parametrize("by", ["expiry", "admin", "holder"])
def test_a_lease_on_a_store_deleted_since_the_take_hands_nothing_back(
    rt: Runtime, by: str, recreated: bool
) -> None:
    """The store a lease was taken from is deleted (and, with ``recreated``, used again:
    a new instance, from ``initial``) while the lease is held. The value went with the
    deleted store: ending the lease (expiry, the admin's "release now", the holder's
    ``release``) must neither create the deleted store again nor put the value into the
    new instance, which never held it. The lease ends once, with nothing handed back.
    Failed before: the hand-back ran as a plain update, which created the deleted store
    again from ``initial`` and appended the value (here ``initial`` holds "job-1" again,
    so "job-1" was in it twice)."""
    q = queue(rt, ["job-1"])
    gate = rt.define()
    eid = released_by_the_holder(rt, q, gate)
    assert state(rt, q) == []
    rt.client.delete_store(q, "q")
    if recreated:
        assert state(rt, q) == ["job-1"]  # a new instance, from initial
    if by == "expiry":
        assert expire_due(now=later(), client=rt.client) == 1
    elif by == "admin":
        assert release_now([ClaimLeaseRecord.objects.get().pk], client=rt.client) == 1
    else:
        rt.client.update_store(gate, "g", updater=lambda d: d["items"].append("go"))
        rt.settle(lambda: get_execution(eid).is_finished)
        assert get_execution(eid).status == "completed", get_execution(eid).error
        assert get_execution(eid).result is True  # this release ended the lease
    assert ClaimLeaseRecord.objects.get().state != "held"
    if recreated:
        assert state(rt, q) == ["job-1"]
    else:
        assert "q" not in rt.client.list_stores(q), "the deleted store was created again"
    assert expire_due(now=later(), client=rt.client) == 0


def test_hand_backs_racing_a_store_deletion_never_create_it_again(rt: Runtime) -> None:
    """Six leases on one store expire; two sweepers on their own PostgreSQL connections
    hand them back while a third connection deletes the store (the release callbacks
    finish only once the deletion committed, so every hand-back's commit meets it). Every
    lease ends once and the deleted store stays deleted. Failed before: the hand-backs
    created the store again (from ``initial``) and put the values in it."""
    on_postgresql(rt)
    deleted = threading.Event()
    name = rt.name("queue")
    rt.stores.append(name)
    jobs = [f"job-{n}" for n in range(6)]

    def put_back_after_the_delete(draft: Any, value: Any) -> None:
        assert deleted.wait(HANG_SECONDS)
        draft["items"].append(value)

    q = define_store(
        name, None, initial=lambda id: {"items": list(jobs)}, release=put_back_after_the_delete
    )

    @rt.workflow
    def wf(step: Step) -> Any:
        lease = yield from step.take(q, "q", first, pop_first, lease=5)
        yield from step.sleep(3600)
        return lease.value

    for _ in jobs:
        start_workflow(wf)
    rt.pump()
    assert state(rt, q) == []
    barrier = threading.Barrier(3, timeout=HANG_SECONDS)
    ended: list[int] = []
    errors: list[BaseException] = []

    def sweeper() -> None:
        try:
            barrier.wait()
            ended.append(expire_due(now=later()))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    def deleter() -> None:
        try:
            barrier.wait()
            time.sleep(0.05)
            rt.client.delete_store(q, "q")
            deleted.set()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            deleted.set()
            connections.close_all()

    threads = [threading.Thread(target=f) for f in (sweeper, sweeper, deleter)]
    for thread in threads:
        thread.start()
    join_or_fail(*threads, what="the threads")
    assert not errors, errors
    assert sum(ended) == len(jobs)
    assert not ClaimLeaseRecord.objects.filter(state="held").exists()
    assert "q" not in rt.client.list_stores(q), rt.client.get_store(q, "q")


@pytest.mark.parametrize("by", ["expiry", "holder"])
def test_a_hand_back_that_loses_a_race_hands_back_the_value_as_taken(rt: Runtime, by: str) -> None:
    """``release(draft, value)`` counts the hand-backs on the value it puts back; the
    first time it runs, another connection writes the store, so the hand-back's commit
    loses and the client runs ``release`` again on the newer state. Each run must get the
    value as it was taken, as each run of an updater gets a fresh draft: the item comes
    back counted once. Failed before: every attempt was given the same decoded object,
    so the first attempt's change to it was still there for the second, and the item
    came back counted twice (and a value appended by reference in a lost attempt was
    changed under the winning one)."""
    bumped: list[str] = []
    name = rt.name("queue")
    rt.stores.append(name)

    def count_and_put_back(draft: Any, value: Any) -> None:
        value["returned"] = value.get("returned", 0) + 1
        draft["items"].append(value)
        if not bumped:  # another writer commits first: this attempt's commit loses
            bumped.append("bump")
            writer = threading.Thread(target=bump)
            writer.start()
            join_or_fail(writer, what="the writer")

    def bump() -> None:
        try:
            rt.client.update_store(q, "q", updater=lambda d: d["items"].append("bump"))
        finally:
            connections.close_all()

    q = define_store(
        name, None, initial=lambda id: {"items": [{"job": "job-1"}]}, release=count_and_put_back
    )
    gate = rt.define()
    if by == "expiry":
        held_lease(rt, q)
        assert expire_due(now=later(), client=rt.client) == 1
    else:
        eid = released_by_the_holder(rt, q, gate)
        rt.client.update_store(gate, "g", updater=lambda d: d["items"].append("go"))
        rt.settle(lambda: get_execution(eid).is_finished)
        assert get_execution(eid).result is True, get_execution(eid).error
    assert bumped == ["bump"], "the hand-back lost its race"
    assert state(rt, q) == ["bump", {"job": "job-1", "returned": 1}]


def test_release_racing_the_expiry_and_release_now_hands_back_once(rt: Runtime) -> None:
    """Each holder releases its lease (``step.release``) while a sweeper expires it and
    the admin's "release now" releases it, each on its own PostgreSQL connection, started
    together (the other two a little later each round, so any may win): each lease ends
    once, exactly one of the three says it ended it, and each value is back once."""
    on_postgresql(rt)
    from yieldstar_django.runtime.executions import run_execution

    jobs = [f"job-{n}" for n in range(8)]
    q = queue(rt, jobs)
    gate = rt.define()

    @rt.workflow
    def wf(step: Step) -> Any:
        lease = yield from step.take(q, "q", first, pop_first, lease=5)
        yield from step.take(gate, "g", first)
        return (yield from step.release(lease))

    eids = [start_workflow(wf) for _ in jobs]
    rt.pump()
    assert state(rt, q) == []
    version = rt.client.get_store(q, "q").version
    leases = {r.execution_id: r.pk for r in ClaimLeaseRecord.objects.all()}
    rt.client.update_store(gate, "g", updater=lambda d: d["items"].append("go"))
    barrier = threading.Barrier(3, timeout=HANG_SECONDS)
    errors: list[BaseException] = []
    ended: dict[str, list[int]] = {"expiry": [], "admin": []}

    def holder() -> None:
        try:
            for eid in eids:
                barrier.wait()
                run_execution(eid)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    def other(kind: str) -> None:
        try:
            for n, eid in enumerate(eids):
                barrier.wait()
                time.sleep(0.001 * n * (1 if kind == "expiry" else 2))
                state = ClaimLeaseState.EXPIRED if kind == "expiry" else ClaimLeaseState.RELEASED
                ended[kind].append(release_now([leases[eid]], state=state))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [
        threading.Thread(target=holder),
        threading.Thread(target=other, args=("expiry",)),
        threading.Thread(target=other, args=("admin",)),
    ]
    for thread in threads:
        thread.start()
    join_or_fail(*threads, what="the threads")
    assert not errors, errors
    rt.settle(lambda: all(get_execution(e).is_finished for e in eids))
    results = [get_execution(e).result for e in eids]
    assert all(isinstance(r, bool) for r in results), results
    assert sum(results) + sum(ended["expiry"]) + sum(ended["admin"]) == len(jobs)
    assert not ClaimLeaseRecord.objects.filter(state="held").exists()
    assert sorted(state(rt, q)) == sorted(jobs)
    assert rt.client.get_store(q, "q").version == version + len(jobs)
