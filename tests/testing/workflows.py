"""Workflows of the ``yieldstar_django.testing`` tests (beyond the docs' example app)."""

from __future__ import annotations

import threading
import time
from typing import Any

from django.utils import timezone

from yieldstar_django import define_store, workflow
from yieldstar_django.models import Execution
from yieldstar_django.runtime import RetryableError

#: Attempts made by ``flaky_hour`` (a step.run side effect the test reads).
ATTEMPTS: list[int] = []

relay_box = define_store("ys-testing-box", None, initial=lambda id: {"items": []})


def _fail_twice() -> str:
    ATTEMPTS.append(len(ATTEMPTS) + 1)
    if len(ATTEMPTS) < 3:
        raise RetryableError("not yet", max_attempts=3, retry_interval=3600)
    return "done"


@workflow("ys-testing-flaky-hour")
def flaky_hour(step: Any) -> Any:
    """A step that fails twice, retried an hour later each time."""
    return (yield from step.run(_fail_twice))


def _never() -> None:
    raise RetryableError("again", max_attempts=10**9, retry_interval=0)


@workflow("ys-testing-restless")
def restless(step: Any) -> Any:
    """Due again at once after every run, for as long as anyone runs it."""
    yield from step.run(_never)


@workflow("ys-testing-producer")
def producer(step: Any, box: str) -> Any:
    """Puts an item in a box (waking whoever waits on it)."""
    yield from step.update(relay_box, box, lambda draft: draft["items"].append("item"))
    return "put"


@workflow("ys-testing-consumer")
def consumer(step: Any, box: str) -> Any:
    """Takes an item from a box."""
    return (
        yield from step.take(
            relay_box,
            box,
            selector=lambda state: state["items"][0] if state["items"] else None,
            claim=lambda draft, item: draft["items"].pop(0),
        )
    )


def _answer(state: Any) -> Any:
    return "answer" if "answer" in state["items"] else None


@workflow("ys-testing-answer-within-an-hour")
def answer_within_an_hour(step: Any, box: str) -> Any:
    """Takes an "answer" from a box or from ``relay_box``'s "other" box, for an hour."""
    pair = yield from step.take_any(
        [(relay_box, box, _answer), (relay_box, "other", _answer)], timeout=3600
    )
    return list(pair)


leased_box = define_store(
    "ys-testing-leased-box",
    None,
    initial=lambda id: {"items": ["job"]},
    release=lambda draft, value: draft["items"].append(value),
)


@workflow("ys-testing-hold-and-stall")
def hold_and_stall(step: Any, box: str) -> Any:
    """Takes the job under a one-minute lease, then stalls for an hour before completing."""
    lease = yield from step.take(
        leased_box,
        box,
        selector=lambda state: state["items"][0] if state["items"] else None,
        claim=lambda draft, item: draft["items"].pop(0),
        lease=60,
    )
    yield from step.sleep(3600)
    return (yield from step.complete(lease))


def deliver_nothing(wakes: Any) -> None:
    """A ``WAKE_BACKEND`` that delivers nothing: the wakes stay due for ``run_until_idle``."""


def _ball(state: Any) -> Any:
    return state["items"][0] if state["items"] else None


def _catch(draft: Any, ball: Any) -> None:
    draft["items"].pop(0)


@workflow("ys-testing-ping-pong")
def ping_pong(step: Any, mine: str, other: str, rounds: int) -> Any:
    """Takes a ball from its box and puts it in the other's, ``rounds`` times: two of them
    wake each other, each run waking the other, for as long as ``rounds`` lasts."""
    for i in range(rounds):
        yield from step.take(relay_box, mine, _ball, _catch, key=f"take-{i}")
        yield from step.update(
            relay_box, other, lambda draft: draft["items"].append("ball"), key=f"put-{i}"
        )
    return rounds


def _tick(i: int) -> int:
    return i


@workflow("ys-testing-busy-until")
def busy_until(step: Any, until: float) -> Any:
    """Runs step after step, never suspending, until ``time.time()`` passes ``until``: one
    run that lasts that long (a loop a test forgot to put a sleep in)."""
    i = 0
    while time.time() < until:
        yield from step.run(_tick, i, key=f"tick-{i}")
        i += 1
    return i


#: Set by ``_pause`` as it starts (for a test that acts while the step runs).
PAUSING = threading.Event()


def _pause(seconds: float) -> float:
    PAUSING.set()
    time.sleep(seconds)
    return seconds


@workflow("ys-testing-slow-step")
def slow_step(step: Any, seconds: float) -> Any:
    """One step that takes ``seconds`` (a slow computation or call), then a quick one."""
    slept = yield from step.run(_pause, seconds)
    yield from step.run(_tick, 1, key="after")
    return slept


def _lease_left(execution_id: str) -> float:
    """Seconds the execution's lease has left, as the run's own connection sees it."""
    expires = Execution.objects.values_list("lease_expires_at", flat=True).get(pk=execution_id)
    assert expires is not None
    return (expires - timezone.now()).total_seconds()


@workflow("ys-testing-lease-left-after-a-slow-step")
def lease_left_after(step: Any, seconds: float) -> Any:
    """A step that takes ``seconds``, then how long the lease has left when the next starts."""
    yield from step.run(_pause, seconds)
    return (yield from step.run(_lease_left, step.execution_id))


def _add_user(username: str) -> str:
    from django.contrib.auth.models import User

    User.objects.create(username=username)
    return username


@workflow("ys-testing-add-user")
def add_user(step: Any, username: str) -> Any:
    """A step that inserts a user row: it fails at the database (``IntegrityError``) when
    the username is taken, which fails the execution."""
    return (yield from step.run(_add_user, username))


def _add_user_durably(username: str) -> str:
    from django.contrib.auth.models import User
    from django.db import transaction

    with transaction.atomic(durable=True):
        User.objects.create(username=username)
    return username


@workflow("ys-testing-add-user-durably")
def add_user_durably(step: Any, username: str) -> Any:
    """A step that inserts a user row in a ``durable`` atomic block."""
    return (yield from step.run(_add_user_durably, username))


#: Whether ``charge`` is fixed (a test deploys the fix by setting it).
FIXED: list[bool] = []
#: The charges ``charge`` made (its side effect).
CHARGES: list[str] = []


def _reserve(order: str) -> str:
    return f"reserved {order}"


def _charge(order: str) -> str:
    if not FIXED:
        raise RuntimeError("the gateway is down")
    CHARGES.append(order)
    return f"charged {order}"


@workflow("ys-testing-order")
def order(step: Any, order: str) -> Any:
    """Reserve, then charge: the charge fails until ``FIXED`` holds a value."""
    reserved = yield from step.run(_reserve, order, key="reserve")
    charged = yield from step.run(_charge, order, key="charge")
    return [reserved, charged]


@workflow("ys-testing-timeout-then-sleep")
def timeout_then_sleep(step: Any, box: str) -> Any:
    """Waits an hour for an answer nobody gives, then sleeps a day, then answers."""
    pair = yield from step.take_any([(relay_box, box, _answer)], timeout=3600)
    yield from step.sleep(86_400)
    return ["slept", *pair]


@workflow("ys-testing-sleep-forever")
def sleep_forever(step: Any) -> Any:
    """Sleeps an hour, again and again (a timer is always set)."""
    while True:
        yield from step.sleep(3600)
