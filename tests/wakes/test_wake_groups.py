"""Many ordinary wakes handed over at once (a fan-out's children) go to the broker in
groups: ``resume_executions(execution_ids)`` messages of up to ``GROUP_SIZE`` each, still
about ``GROUP_FROM`` messages at least; takeovers and small hand-overs stay one message a
wake. On a real broker, consumed as a worker would."""

from __future__ import annotations

from typing import Any

from celery import Celery

from tests.shared.fixtures import configure
from yieldstar_django.core.results import Wake
from yieldstar_django.wakes import celery_backend
from yieldstar_django.wakes.backends import (
    GROUP_FROM,
    GROUP_SIZE,
    RESUME_GROUP_TASK,
    RESUME_TASK,
    groups,
)

from .test_takeover_priority import broker_app  # noqa: F401  (the fixture)


def _wakes(n: int, prefix: str = "e") -> list[Wake]:
    return [Wake(f"{prefix}{i}", "wf") for i in range(n)]


def test_up_to_group_from_ordinary_wakes_are_a_message_each() -> None:
    wakes = _wakes(GROUP_FROM)
    assert groups(wakes) == [[wake] for wake in wakes]


def test_more_are_grouped_in_order_and_a_takeover_stays_alone_first() -> None:
    wakes = _wakes(1000)
    rescue = Wake("rescue", "wf", takeover=True)
    messages = groups([*wakes[:500], rescue, *wakes[500:]])
    assert messages[0] == [rescue]
    grouped = messages[1:]
    assert [wake for group in grouped for wake in group] == wakes
    assert max(len(group) for group in grouped) == GROUP_SIZE
    assert len(grouped) >= GROUP_FROM - 1
    # A little over the threshold: groups of two, not one message a wake.
    assert {len(group) for group in groups(_wakes(GROUP_FROM + 1))} == {1, 2}
    # Far over it: never more than GROUP_SIZE a message.
    assert max(len(group) for group in groups(_wakes(20 * GROUP_FROM * GROUP_SIZE))) == GROUP_SIZE


def _messages(app: Celery, queue: str) -> list[tuple[str, list[Any]]]:
    """Every message of ``queue``: its task name and arguments."""
    found = []
    with app.connection_for_read() as connection:
        bound = app.amqp.queues[queue](connection.default_channel)
        while (message := bound.get(no_ack=True)) is not None:
            found.append((message.headers["task"], message.decode()[0]))
    return found


def test_the_celery_backend_sends_groups_of_resumes(broker_app: Any) -> None:  # noqa: F811
    app, queue = broker_app
    wakes = _wakes(2 + 3 * GROUP_FROM)  # 2 alone, then groups of 3
    with configure(PUBLISH_IN_TESTS=True):
        celery_backend(wakes[:2])
        celery_backend(wakes[2:])
    messages = _messages(app, queue)
    assert messages[:2] == [(RESUME_TASK, ["e0"]), (RESUME_TASK, ["e1"])]
    assert {name for name, _ in messages[2:]} == {RESUME_GROUP_TASK}
    assert [id for _, (ids,) in messages[2:] for id in ids] == [w.execution_id for w in wakes[2:]]
    assert len(messages) == 2 + GROUP_FROM
