"""Step primitives: results recorded in the heap and replayed, errors re-raised as their
class, durable values enforced."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.conf import settings
from django.db import transaction
from django.test import override_settings

from yieldstar_django import clock
from yieldstar_django.conf import MAX_SECONDS
from yieldstar_django.core.definition import StoreDefinition, define_store
from yieldstar_django.core.durable import encode_durable
from yieldstar_django.core.errors import StoreKeyError, WorkflowValueError, register_error_class
from yieldstar_django.core.results import StoreSnapshot, StoreUpdateResult
from yieldstar_django.models import Execution
from yieldstar_django.runtime import (
    RetryableError,
    Step,
    WorkflowStepError,
    cancel_execution,
    get_execution,
    start_workflow,
)
from yieldstar_django.runtime.outcomes import durable_limits

from .conftest import Runtime


class PaymentDeclined(Exception):
    """An importable, unregistered error class."""

    def __init__(self, order: str, amount: int) -> None:
        super().__init__(f"order {order}: {amount} declined")
        self.order = order
        self.amount = amount


class Registered(Exception):
    pass


register_error_class("tests.Registered", Registered)


def test_run_results_are_recorded_and_replayed(rt: Runtime) -> None:
    calls: list[str] = []

    def add(a: int, b: int) -> int:
        calls.append("add")
        return a + b

    @rt.workflow
    def wf(step: Step, x: int) -> Any:
        first = yield from step.run(add, x, 1)
        second = yield from step.run(add, first, 10, key="second")
        yield from step.sleep(0)
        return {"first": first, "second": second}

    eid = start_workflow(wf, 5)
    rt.settle()
    execution = get_execution(eid)
    assert execution.status == "completed"
    assert execution.result == {"first": 6, "second": 16}
    assert calls == ["add", "add"]
    steps = rt.steps(eid)
    assert sorted(steps) == ["0", "2", "second"]
    assert [steps[k].kind for k in ("0", "second", "2")] == ["run", "run", "sleep"]
    assert steps["second"].value == 16 and steps["second"].position == 1


def test_replay_returns_recorded_results_without_calling_again(rt: Runtime) -> None:
    calls: list[int] = []
    store = rt.define(initial=lambda id: {"items": []})

    def record(n: int) -> list[int]:
        calls.append(n)
        return [n, n]  # read back as a list on every replay

    @rt.workflow
    def wf(step: Step) -> Any:
        value = yield from step.run(record, 1)
        taken = yield from step.take(
            store,
            "q",
            lambda s: s["items"][0] if s["items"] else None,
            lambda d, sel: d["items"].pop(0),
        )
        return [value, taken]

    eid = start_workflow(wf)
    rt.settle()
    assert get_execution(eid).status == "waiting"
    rt.client.update_store(store, "q", updater=lambda d: d["items"].append("job"))
    rt.settle()
    execution = get_execution(eid)
    assert execution.status == "completed", execution.error
    assert execution.result == [[1, 1], "job"]
    assert calls == [1]
    assert execution.runs == 2


def test_update_and_get_return_typed_results(rt: Runtime) -> None:
    store = rt.define(initial=lambda id: {"n": 0})

    @rt.workflow
    def wf(step: Step) -> Any:
        updated = yield from step.update(store, "s", lambda d: d.update(n=d["n"] + 1))
        snapshot = yield from step.get(store, "s")
        assert isinstance(updated, StoreUpdateResult)
        assert isinstance(snapshot, StoreSnapshot)
        yield from step.sleep(0.05)
        again = yield from step.get(store, "s")
        return [updated.version, updated.state, snapshot.version, again.state]

    eid = start_workflow(wf)
    rt.settle(lambda: get_execution(eid).is_finished)
    execution = get_execution(eid)
    assert execution.status == "completed", execution.error
    assert execution.result == [1, {"n": 1}, 1, {"n": 1}]
    # The update happened once although the workflow was replayed after the sleep.
    assert rt.client.get_store(store, "s").version == 1


def test_step_error_is_reraised_as_its_class_on_every_replay(rt: Runtime) -> None:
    calls: list[str] = []

    def declined() -> None:
        calls.append("declined")
        raise PaymentDeclined("o-1", 30)

    def registered() -> None:
        calls.append("registered")
        raise Registered("reg")

    def builtin() -> None:
        calls.append("builtin")
        raise KeyError("k")

    seen: list[tuple[str, Any]] = []

    @rt.workflow
    def wf(step: Step) -> Any:
        out = []
        for fn in (declined, registered, builtin):
            try:
                yield from step.run(fn)
            except (PaymentDeclined, Registered, KeyError) as exc:
                seen.append((type(exc).__name__, exc.args))
                out.append(type(exc).__name__)
                if isinstance(exc, PaymentDeclined):
                    out.append([exc.order, exc.amount])
        yield from step.sleep(0.05)
        return out

    eid = start_workflow(wf)
    rt.settle(lambda: get_execution(eid).is_finished)
    execution = get_execution(eid)
    assert execution.status == "completed", execution.error
    assert execution.result == ["PaymentDeclined", ["o-1", 30], "Registered", "KeyError"]
    assert calls == ["declined", "registered", "builtin"]  # never called on replay
    assert seen[:3] == seen[3:]  # the replay saw the same errors at the same points
    steps = rt.steps(eid)
    assert steps["0"].status == "failed"
    assert steps["0"].error["type"] == f"{__name__}:PaymentDeclined"
    assert steps["1"].error["type"] == "tests.Registered"
    assert steps["2"].error["type"] == "builtins:KeyError"


def test_unknown_error_class_is_revived_as_workflow_step_error(rt: Runtime) -> None:
    from yieldstar_django.runtime.errors import error_from_record

    exc = error_from_record({"type": "gone.module:Missing", "message": "boom", "args": ["boom"]})
    assert isinstance(exc, WorkflowStepError)
    assert exc.error_type == "gone.module:Missing" and str(exc) == "boom"


def test_uncaught_error_fails_the_execution(rt: Runtime) -> None:
    def boom() -> None:
        raise ValueError("bad input")

    @rt.workflow
    def wf(step: Step) -> Any:
        yield from step.run(boom)

    eid = start_workflow(wf)
    rt.settle()
    execution = get_execution(eid)
    assert execution.status == "failed"
    assert execution.error is not None
    assert execution.error["type"] == "builtins:ValueError"
    assert execution.error["message"] == "bad input"
    assert "boom" in execution.error["traceback"]
    assert execution.lease_owner == "" and execution.finished_at is not None


def test_step_results_must_be_durable(rt: Runtime) -> None:
    @rt.workflow
    def wf(step: Step) -> Any:
        try:
            yield from step.run(lambda: {1, 2})
        except WorkflowValueError as exc:
            return [exc.code, exc.step_key]
        return "unreachable"

    eid = start_workflow(wf)
    rt.settle()
    assert get_execution(eid).result == ["INVALID_STEP_VALUE", "0"]


def test_workflow_result_must_be_durable(rt: Runtime) -> None:
    @rt.workflow
    def wf(step: Step) -> Any:
        yield from step.sleep(0)
        return float("nan")

    eid = start_workflow(wf)
    rt.settle()
    execution = get_execution(eid)
    assert execution.status == "failed"
    assert execution.error is not None and execution.error["type"] == "WorkflowValueError"


def test_arguments_must_be_durable(rt: Runtime) -> None:
    @rt.workflow
    def wf(step: Step, value: Any) -> Any:
        yield from step.sleep(0)

    with pytest.raises(WorkflowValueError):
        start_workflow(wf, object())
    assert not Execution.objects.exists()


def test_retryable_error_retries_on_a_durable_timer(rt: Runtime) -> None:
    attempts: list[int] = []

    def flaky() -> str:
        attempts.append(len(attempts) + 1)
        if len(attempts) < 3:
            raise RetryableError("gateway timeout", max_attempts=3, retry_interval=0.05)
        return "paid"

    @rt.workflow
    def wf(step: Step) -> Any:
        return (yield from step.run(flaky))

    eid = start_workflow(wf)
    rt.pump()
    execution = get_execution(eid)
    assert execution.status == "retrying"
    assert execution.wake_at is not None
    step = rt.steps(eid)["0"]
    assert step.status == "pending" and step.attempts == 1
    assert step.error is not None and step.error["message"] == "gateway timeout"
    rt.settle(lambda: get_execution(eid).is_finished)
    assert get_execution(eid).result == "paid"
    assert attempts == [1, 2, 3]
    assert rt.steps(eid)["0"].attempts == 3


def test_exhausted_retries_record_the_cause(rt: Runtime) -> None:
    def always() -> None:
        try:
            raise ConnectionError("down")
        except ConnectionError as exc:
            raise RetryableError(max_attempts=2, retry_interval=0) from exc

    @rt.workflow
    def wf(step: Step) -> Any:
        try:
            yield from step.run(always)
        except ConnectionError as exc:
            return f"gave up: {exc}"
        return "unreachable"

    eid = start_workflow(wf)
    rt.settle(lambda: get_execution(eid).is_finished)
    assert get_execution(eid).result == "gave up: down"
    step = rt.steps(eid)["0"]
    assert step.status == "failed" and step.attempts == 2


def test_retryable_subclass_defaults() -> None:
    class Slow(RetryableError):
        max_attempts = 5
        retry_interval = 2.0
        backoff = 2.0

    exc = Slow()
    assert exc.max_attempts == 5
    assert [exc.delay_after(n) for n in (1, 2, 3)] == [2.0, 4.0, 8.0]
    assert Slow(max_attempts=1).max_attempts == 1
    with pytest.raises(ValueError):
        RetryableError(max_attempts=0)


def test_sleep_completes_after_its_time_and_not_before(rt: Runtime) -> None:
    @rt.workflow
    def wf(step: Step) -> Any:
        yield from step.sleep(0.3)
        return "awake"

    eid = start_workflow(wf)
    rt.pump()
    execution = get_execution(eid)
    assert execution.status == "sleeping"
    sleep = rt.steps(eid)["0"]
    assert sleep.status == "pending" and sleep.wake_at is not None
    assert (sleep.wake_at - sleep.created_at).total_seconds() >= 0.3
    # An early wake (a spurious one) does not end the sleep.
    from yieldstar_django.runtime.executions import run_execution

    run_execution(eid)
    assert rt.steps(eid)["0"].status == "pending"
    rt.settle(lambda: get_execution(eid).is_finished)
    sleep = rt.steps(eid)["0"]
    assert sleep.status == "completed"
    assert sleep.recorded_at is not None and sleep.recorded_at >= sleep.wake_at
    assert get_execution(eid).result == "awake"


def test_takes_whose_selectors_test_isinstance_get_what_arrives(rt: Runtime) -> None:
    """The usual idiom, ``isinstance(x, list)`` / ``isinstance(x, dict)`` before indexing,
    in a take and a take_any that wait for an item: each gets it when it arrives. Before,
    the selector's views were no ``list`` or ``dict``, so the executions were woken and
    went back to waiting for ever."""
    jobs, orders = rt.define(), rt.define()

    def first_job(s: Any) -> Any:
        items = s["items"] if isinstance(s, dict) else None
        return items[0] if isinstance(items, list) and items else None

    def first_order(s: Any) -> Any:
        return next((o for o in s["items"] if isinstance(o, dict) and o.get("paid")), None)

    def pop(draft: Any, selected: Any) -> None:
        draft["items"].remove(selected)

    @rt.workflow
    def wf(step: Step) -> Any:
        job = yield from step.take(jobs, "q", first_job, pop)
        index, order = yield from step.take_any([(orders, "q", first_order, pop)])
        return [job, index, order]

    eid = start_workflow(wf)
    rt.settle()
    assert get_execution(eid).status == "waiting"
    rt.client.update_store(jobs, "q", updater=lambda d: d["items"].append("job-1"))
    rt.settle()
    assert get_execution(eid).status == "waiting", "now on the take_any"
    assert rt.client.get_store(jobs, "q").state == {"items": []}
    rt.client.update_store(orders, "q", updater=lambda d: d["items"].append({"paid": False}))
    rt.settle()
    assert get_execution(eid).status == "waiting"
    rt.client.update_store(orders, "q", updater=lambda d: d["items"].append({"paid": True}))
    rt.settle(lambda: get_execution(eid).is_finished)
    execution = get_execution(eid)
    assert execution.status == "completed", execution.error
    assert execution.result == ["job-1", 0, {"paid": True}]
    assert rt.client.get_store(orders, "q").state == {"items": [{"paid": False}]}


def start_taking_items(rt: Runtime) -> tuple[StoreDefinition, str]:
    """A new store (``rt.define()``) and the id of a started execution that takes the
    items of its instance ``q`` once there are any, and returns them."""
    store = rt.define()

    @rt.workflow
    def wf(step: Step) -> Any:
        return (yield from step.take(store, "q", lambda s: s["items"] or None))

    return store, start_workflow(wf)


def test_cancel_stops_a_waiting_execution(rt: Runtime) -> None:
    store, eid = start_taking_items(rt)
    rt.settle()
    assert get_execution(eid).status == "waiting"
    assert cancel_execution(eid) is True
    assert cancel_execution(eid) is False
    execution = get_execution(eid)
    assert execution.status == "cancelled" and execution.is_finished
    rt.client.update_store(store, "q", updater=lambda d: d["items"].append(1))
    rt.settle()
    assert get_execution(eid).status == "cancelled"
    assert rt.client.get_store(store, "q").state == {"items": [1]}


@pytest.mark.django_db
def test_get_execution_of_unknown_id_raises() -> None:
    with pytest.raises(Execution.DoesNotExist):
        get_execution("no-such-execution")


@pytest.mark.usefixtures("transactional_db")
def test_missing_execution_resume_is_a_no_op() -> None:
    from yieldstar_django.runtime.executions import ResumeResult, run_execution

    assert run_execution("no-such-execution") == ResumeResult.GONE


def test_start_is_idempotent_with_an_execution_id(rt: Runtime) -> None:
    calls: list[int] = []

    @rt.workflow
    def wf(step: Step, n: int) -> Any:
        return (yield from step.run(lambda: calls.append(n) or n))

    assert start_workflow(wf, 1, execution_id="order-1") == "order-1"
    assert start_workflow(wf, 1, execution_id="order-1") == "order-1"
    rt.settle()
    assert start_workflow(wf, 1, execution_id="order-1") == "order-1"
    rt.settle()
    assert Execution.objects.filter(pk="order-1").count() == 1
    assert get_execution("order-1").result == 1
    assert calls == [1]
    # Other arguments, or another workflow, are refused (see test_starts.py).
    with pytest.raises(ValueError, match="already exists"):
        start_workflow(wf, 2, execution_id="order-1")

    @rt.workflow
    def other(step: Step) -> Any:
        yield from step.sleep(0)

    with pytest.raises(ValueError, match="already exists"):
        start_workflow(other, execution_id="order-1")


def test_start_in_a_rolled_back_transaction_creates_and_runs_nothing(rt: Runtime) -> None:
    @rt.workflow
    def wf(step: Step) -> Any:
        yield from step.sleep(0)

    class Rollback(Exception):
        pass

    with pytest.raises(Rollback), transaction.atomic():
        start_workflow(wf, execution_id="rolled-back")
        raise Rollback
    rt.settle()
    assert not Execution.objects.filter(pk="rolled-back").exists()


def test_start_by_name_and_unknown_names(rt: Runtime) -> None:
    @rt.workflow
    def wf(step: Step, x: int) -> Any:
        yield from step.sleep(0)
        return x * 2

    eid = start_workflow(wf.name, x=21)
    rt.settle()
    assert get_execution(eid).result == 42
    assert get_execution(eid).input == {"args": [], "kwargs": {"x": 21}}
    assert wf.start(1) != eid
    with pytest.raises(LookupError, match="No workflow named"):
        start_workflow("no-such-workflow")


# --- durations the timers' clock cannot hold -------------------------------------------------


def test_a_sleep_longer_than_the_clock_holds_raises_value_error_in_the_workflow(
    rt: Runtime,
) -> None:
    """A sleep of 10**12 s (past year 9999) is refused where it is made, like a negative
    one, instead of crashing every run of the execution with ``OverflowError``."""

    @rt.workflow
    def wf(step: Step) -> Any:
        refused = []
        for seconds in (1e12, timedelta.max):
            try:
                yield from step.sleep(seconds)
            except ValueError:
                refused.append(True)
        return refused

    eid = start_workflow(wf)
    rt.settle(lambda: get_execution(eid).is_finished)
    assert get_execution(eid).result == [True, True]


def test_lease_and_timeout_longer_than_the_clock_holds_are_value_errors(rt: Runtime) -> None:
    store = define_store(rt.name("store"), None, initial=lambda id: {}, release=lambda d, v: None)
    rt.stores.append(store.name)
    step = Step("e", "w")
    with pytest.raises(ValueError):
        next(step.take(store, "a", lambda s: s, lease=1e12))
    with pytest.raises(ValueError):
        next(step.take_any([(store, "a", lambda s: s, None)], timeout=1e12))


def test_a_retry_delay_past_the_clock_is_capped(rt: Runtime) -> None:
    """A retry due in 10**12 s used to crash every run (``OverflowError``) after calling
    the function again: the execution stayed ``running`` and called it once per lease
    timer, forever. The delay is capped at ``MAX_SECONDS`` (100 years)."""
    calls: list[int] = []

    def slow() -> None:
        calls.append(1)
        raise RetryableError("later", max_attempts=2, retry_interval=1e12)

    @rt.workflow
    def wf(step: Step) -> Any:
        yield from step.run(slow)

    eid = start_workflow(wf)
    rt.pump()
    execution = get_execution(eid)
    assert execution.status == "retrying" and calls == [1]
    assert execution.wake_at is not None
    assert execution.wake_at - clock.now() <= timedelta(seconds=MAX_SECONDS)
    assert execution.wake_at - clock.now() > timedelta(days=365 * 99)


def test_retry_delays_are_capped_and_finite() -> None:
    # backoff ** n overflows a float long before max_attempts says stop
    assert RetryableError(retry_interval=1, backoff=10).delay_after(400) == MAX_SECONDS
    assert RetryableError(retry_interval=1e300, backoff=1e10).delay_after(3) == MAX_SECONDS

    class Forever(RetryableError):
        retry_interval = float("inf")

    assert Forever().delay_after(1) == MAX_SECONDS
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError):
            RetryableError(retry_interval=bad)
        with pytest.raises(ValueError):
            RetryableError(backoff=bad)


# --- a step's error is the same on the first run and on replays --------------------------------


class Late(Exception):
    """An importable error with a non-durable attribute (as ``requests.HTTPError`` has its
    ``.response``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.when = datetime(2020, 1, 1)


def test_a_caught_step_error_is_the_same_on_the_first_run_and_on_replay(rt: Runtime) -> None:
    """The first run used to see the live exception and replays its revival: a class that
    cannot be imported (defined in a function) was caught by the first run and came back
    as ``WorkflowStepError`` on replay, and a non-durable attribute was there on the first
    run only. Replays must see what the first run saw."""
    seen: list[tuple[str, str]] = []

    class Local(Exception):
        pass

    def local() -> None:
        raise Local("local")

    def late() -> None:
        raise Late("late")

    @rt.workflow
    def wf(step: Step) -> Any:
        for fn in (local, late):
            try:
                yield from step.run(fn)
            except Exception as exc:
                seen.append((type(exc).__name__, repr(getattr(exc, "when", "missing"))))
        yield from step.sleep(0.05)
        return len(seen)

    eid = start_workflow(wf)
    rt.settle(lambda: get_execution(eid).is_finished)
    assert get_execution(eid).status == "completed", get_execution(eid).error
    assert len(seen) == 4
    assert seen[:2] == seen[2:]  # the replay saw what the first run saw


# --- an error whose str() raises is still recorded ---------------------------------------------


class BadStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str() of this error fails")


def test_an_error_whose_str_raises_is_recorded(rt: Runtime) -> None:
    """Recording such an error (from a step, or out of the workflow) used to raise from
    ``str(exc)``: the run crashed, the execution stayed ``running`` and ran again at each
    lease timer."""

    def boom() -> None:
        raise BadStr("x")

    @rt.workflow
    def in_step(step: Step) -> Any:
        try:
            yield from step.run(boom)
        except BadStr:
            return "caught"

    @rt.workflow
    def in_workflow(step: Step) -> Any:
        yield from step.sleep(0)
        raise BadStr("y")

    first, second = start_workflow(in_step), start_workflow(in_workflow)
    rt.settle(lambda: get_execution(first).is_finished and get_execution(second).is_finished)
    assert get_execution(first).result == "caught"
    assert rt.steps(first)["0"].error["type"] == f"{__name__}:BadStr"
    error = get_execution(second).error
    assert get_execution(second).status == "failed"
    assert error is not None and error["type"] == f"{__name__}:BadStr"
    assert "str() failed" in error["message"]


def test_a_step_key_the_heap_cannot_hold_is_refused_at_the_call() -> None:
    """A key holding NUL or a lone surrogate is refused where the workflow names it (as a
    store id is), not by the database when the heap row is written."""
    step = Step("e", "wf")
    for key, limit in [
        ("a\x00b", "nul"),
        ("a\ud800b", "surrogate"),
        ("k" * 256, "length"),
        ("", "empty"),
    ]:
        with pytest.raises(StoreKeyError) as info:
            next(step.run(len, "x", key=key))
        assert (info.value.label, info.value.limit) == ("step key", limit)
        assert not isinstance(info.value, TypeError)
    with pytest.raises(StoreKeyError) as info:
        next(step.run(len, "x", key=5))  # type: ignore[arg-type]
    assert info.value.limit == "type" and isinstance(info.value, TypeError)


# --- store states at the durable-value limits ----------------------------------------------


def _limits(**changes: int) -> override_settings:
    """``override_settings`` of the durable-value limits, the harness's other settings kept."""
    return override_settings(YIELDSTAR={**settings.YIELDSTAR, **changes})


#: A state exactly as deep as ``MAX_DEPTH`` 4 allows (dict, list, list, dict), and one
#: exactly as large as ``MAX_STATE_BYTES`` 1024 allows.
AT_THE_LIMITS = {
    "depth": ({"MAX_DEPTH": 4}, {"a": [[{}]]}),
    "bytes": ({"MAX_STATE_BYTES": 1024}, {"a": "x" * (1024 - len('{"a":""}'))}),
}


@pytest.mark.parametrize("limit", sorted(AT_THE_LIMITS))
def test_store_steps_record_a_state_at_the_limits(rt: Runtime, limit: str) -> None:
    """A state as deep, or as large, as the limits allow is a durable value, and so is what
    ``get``, ``update`` and ``take_any`` return of it. Their heap records wrap the state
    (in a dict with its versions; in a pair with the choice's index), and the wrapper was
    checked as if it were the workflow's value: one level, or a few bytes, over."""
    changes, state = AT_THE_LIMITS[limit]
    store = rt.define(initial=lambda id: {"a": state["a"]})

    @rt.workflow
    def wf(step: Step) -> Any:
        snapshot = yield from step.get(store, "s")
        updated = yield from step.update(store, "s", lambda draft: None)
        index, selected = yield from step.take_any([(store, "s", lambda s: s, None)])
        return [snapshot.state == state, updated.state == state, index, selected == state]

    with _limits(**changes):
        encode_durable(state, limits=durable_limits())  # at the limit: durable
        beyond = [state] if limit == "depth" else {"a": state["a"] + "x"}
        with pytest.raises(WorkflowValueError):  # one level, or one byte, more is not
            encode_durable(beyond, limits=durable_limits())
        eid = start_workflow(wf)
        rt.settle(lambda: get_execution(eid).is_finished)
    execution = get_execution(eid)
    assert execution.status == "completed", execution.error
    assert execution.result == [True, True, 0, True]


def test_a_get_of_a_state_past_the_limits_raises_into_the_workflow(rt: Runtime) -> None:
    """A state written under larger limits than today's is not a durable step result: the
    ``get`` raises ``WorkflowValueError`` into the workflow at that step (as ``run`` does),
    instead of crashing the run, which left the execution ``running``, run again (and
    crashing again) at every lease timer."""
    store = rt.define(initial=lambda id: {"a": [[[[{}]]]]})  # six levels
    rt.client.get_store(store, "s")  # created under the default limits

    @rt.workflow
    def wf(step: Step) -> Any:
        try:
            yield from step.get(store, "s")
        except WorkflowValueError as exc:
            return [exc.code, exc.step_key]
        return "unreachable"

    with _limits(MAX_DEPTH=4):
        eid = start_workflow(wf)
        rt.settle(lambda: get_execution(eid).is_finished)
    execution = get_execution(eid)
    assert execution.status == "completed", execution.error
    assert execution.result == ["INVALID_STEP_VALUE", "0"]
    assert rt.steps(eid)["0"].status == "failed"


def test_an_execution_id_the_tables_cannot_hold_is_refused(rt: Runtime) -> None:
    """An execution id holding NUL or a lone surrogate is a ``ValueError`` at
    ``start_workflow`` (as a step key or a store id is), and names no execution: before,
    PostgreSQL raised ``DataError`` (NUL) and both databases ``UnicodeEncodeError``
    (surrogate); SQLite stored a NUL id, whose execution ``run_execution`` then refused to
    run (``gone``, its wake never acknowledged) and ``get_execution`` said did not exist."""
    from yieldstar_django.models import WakeIntent
    from yieldstar_django.runtime.executions import ResumeResult, run_execution

    @rt.workflow
    def wf(step: Step) -> Any:
        yield from step.sleep(0)

    for bad in ("a\x00b", "a\ud800b"):
        with pytest.raises(ValueError, match="execution id"):
            start_workflow(wf, execution_id=bad)
        with pytest.raises(Execution.DoesNotExist):
            get_execution(bad)
        assert cancel_execution(bad) is False
        assert run_execution(bad) == ResumeResult.GONE
    assert not Execution.objects.exists()
    assert not WakeIntent.objects.exists()


def test_an_error_s_none_arguments_are_revived_as_none(rt: Runtime) -> None:
    """A ``None`` among an error's ``args`` is a durable value and comes back as ``None``,
    on the first run and on replay, as a ``None`` attribute does; it came back as the
    string ``"None"`` (recorded as a value that is not durable, by its ``str()``)."""

    def boom() -> None:
        raise LookupError("missing", None, 0, False)

    @rt.workflow
    def wf(step: Step) -> Any:
        try:
            yield from step.run(boom)
        except LookupError as exc:
            first = list(exc.args)
        yield from step.sleep(0.01)  # the replay after it sees the recorded error again
        return first

    eid = start_workflow(wf)
    rt.settle(lambda: get_execution(eid).is_finished)
    execution = get_execution(eid)
    assert execution.status == "completed", execution.error
    assert execution.result == ["missing", None, 0, False]
    assert execution.runs >= 2
    assert rt.steps(eid)["0"].error["args"] == ["missing", None, 0, False]
