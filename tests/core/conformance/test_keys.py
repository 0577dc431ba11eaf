"""Keys a store call is given: what the tables cannot hold (a store name or id, an
execution id, a step key or a workflow id past ``MAX_KEY_LENGTH`` characters, holding
``"\\x00"`` or a lone surrogate, or not a ``str``) is refused by every client alike, with
the same ``ValueError``/``TypeError``, before any user code runs, and nothing is written.
A key of exactly ``MAX_KEY_LENGTH`` characters is accepted. So is a store step whose four
keys hold ``MAX_LEDGER_KEY_BYTES`` bytes of UTF-8 together, and not one more.

Failed before on the in-memory client, which accepted every one of them: unit tests on
it passed where the database clients refuse the call.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import Any

import pytest

from yieldstar_django.core.constants import MAX_KEY_LENGTH, MAX_LEDGER_KEY_BYTES
from yieldstar_django.core.definition import define_store, unregister_store
from yieldstar_django.core.results import StoreSnapshot, StoreStepId, StoreWaiter

LONG = "k" * (MAX_KEY_LENGTH + 1)
FULL = "k" * MAX_KEY_LENGTH
UNSTORABLE = 'cannot hold "\\x00" or lone surrogates'

#: (label, bad key, the exception, what its message says).
BAD_KEYS: list[tuple[str, Any, type[Exception], str]] = [
    ("too long", LONG, ValueError, f"is longer than {MAX_KEY_LENGTH} characters"),
    ("nul", "a\x00b", ValueError, UNSTORABLE),
    ("surrogate", "a\ud800", ValueError, UNSTORABLE),
    ("not a str", 7, TypeError, "must be a str, not int"),
]
BAD_IDS = [pytest.param(*bad, id=bad[0]) for bad in BAD_KEYS]
#: A store name that is not a ``str`` is ``define_store``'s to refuse.
BAD_NAMES = [pytest.param(*bad, id=bad[0]) for bad in BAD_KEYS if isinstance(bad[1], str)]


def never(*args: Any) -> Any:
    raise AssertionError("user code ran for a call that must be refused first")


@pytest.mark.parametrize(("label", "bad", "error", "message"), BAD_IDS)
def test_a_bad_store_id_is_refused_and_creates_nothing(
    harness: Any, define: Any, label: str, bad: Any, error: type[Exception], message: str
) -> None:
    d = define()
    c = harness.client
    calls: list[Callable[[], Any]] = [
        lambda: c.get_store(d, bad),
        lambda: c.update_store(d, bad, updater=never),
        lambda: c.update_store(d, bad, updater=never, step_id=StoreStepId("e", "s")),
        lambda: c.take_from_store(d, bad, selector=never, claim=None),
        lambda: c.delete_store(d, bad),
    ]
    for call in calls:
        with pytest.raises(error, match=re.escape(f"store id {message}")):
            call()
    assert c.list_stores(d) == []


@pytest.mark.parametrize(("label", "bad", "error", "message"), BAD_NAMES)
def test_a_bad_store_name_is_refused_and_creates_nothing(
    harness: Any, label: str, bad: str, error: type[Exception], message: str
) -> None:
    d = define_store(bad, None, initial=never)
    try:
        with pytest.raises(error, match=re.escape(f"store name {message}")):
            harness.client.get_store(d, "a")
        with pytest.raises(error, match=re.escape(f"store name {message}")):
            harness.client.list_stores(d)
    finally:
        unregister_store(bad)


@pytest.mark.parametrize(("label", "bad", "error", "message"), BAD_IDS)
@pytest.mark.parametrize("part", ["step execution id", "step key"])
def test_a_bad_step_id_is_refused_before_user_code_and_changes_nothing(
    harness: Any,
    define: Any,
    part: str,
    label: str,
    bad: Any,
    error: type[Exception],
    message: str,
) -> None:
    d = define(initial=lambda id: {"items": [1], "count": 0})
    c = harness.client
    before = c.get_store(d, "a")
    step = StoreStepId(bad, "s") if part == "step execution id" else StoreStepId("e", bad)
    with pytest.raises(error, match=re.escape(f"{part} {message}")):
        c.update_store(d, "a", updater=never, step_id=step)
    with pytest.raises(error, match=re.escape(f"{part} {message}")):
        c.take_from_store(d, "a", selector=never, claim=None, step_id=step)
    assert c.get_store(d, "a") == before
    assert len(harness.changed_paths(d, "a")) == 0


@pytest.mark.parametrize(("label", "bad", "error", "message"), BAD_IDS)
@pytest.mark.parametrize("part", ["workflow id", "execution id", "step key"])
def test_a_waiter_with_a_bad_key_is_refused_and_not_registered(
    harness: Any,
    define: Any,
    part: str,
    label: str,
    bad: Any,
    error: type[Exception],
    message: str,
) -> None:
    d = define()
    c = harness.client
    missed = c.take_from_store(d, "q", selector=lambda s: None, claim=None)
    keys = {"workflow id": "wf", "execution id": "e", "step key": "s"} | {part: bad}
    waiter = StoreWaiter(
        keys["workflow id"],
        keys["execution id"],
        keys["step key"],
        d.name,
        "q",
        missed.instance_id,
        missed.version,
        missed.read_paths,
    )
    with pytest.raises(error, match=re.escape(f"{part} {message}")):
        c.register_waiter(waiter)
    assert harness.waiters(d, "q") == []
    assert harness.wakes == []
    if part != "workflow id":
        removal = {"execution id": (bad, None), "step key": ("e", bad)}[part]
        with pytest.raises(error, match=re.escape(f"{part} {message}")):
            c.remove_waiters(*removal)


def test_keys_of_exactly_the_limit_are_accepted(harness: Any) -> None:
    d = define_store(FULL, None, initial=lambda id: {"items": [1]})
    try:
        c = harness.client
        step = StoreStepId(FULL, FULL)
        taken = c.take_from_store(
            d, FULL, selector=lambda s: s["items"][0], claim=None, step_id=step
        )
        again = c.take_from_store(d, FULL, selector=never, claim=None, step_id=step)
        assert taken.matched and again == taken  # replayed from the ledger
        assert c.list_stores(d) == [FULL]
        missed = c.take_from_store(d, FULL, selector=lambda s: None, claim=None)
        c.register_waiter(
            StoreWaiter(FULL, FULL, FULL, d.name, FULL, missed.instance_id, missed.version, ())
        )
        assert [w.step_key for w in harness.waiters(d, FULL)] == [FULL]
        c.remove_waiters(FULL, FULL)
        assert harness.waiters(d, FULL) == []
        c.delete_store(d, FULL)
        assert c.list_stores(d) == []
    finally:
        unregister_store(FULL)


def _text_of_bytes(size: int, rng: random.Random) -> str:
    """A key of ``size`` bytes of UTF-8 (at most 765), made of random CJK characters (3
    bytes each, so no compression shrinks it) and ASCII for the rest."""
    cjk = "".join(chr(rng.randrange(0x4E00, 0x9FFF)) for _ in range(size // 3))
    return cjk + "k" * (size % 3)


def _ledger_keys(total: int) -> tuple[str, str, str, str]:
    """Store name, store id, execution id and step key of ``total`` bytes together."""
    rng = random.Random(total)
    sizes = [total // 4] * 3 + [total - 3 * (total // 4)]
    name, id, execution_id, step_key = (_text_of_bytes(size, rng) for size in sizes)
    assert all(len(key) <= MAX_KEY_LENGTH for key in (name, id, execution_id, step_key))
    return name, id, execution_id, step_key


LEDGER_KEY_BYTES = MAX_LEDGER_KEY_BYTES


def test_a_step_whose_keys_the_ledger_cannot_index_is_refused_alike(harness: Any) -> None:
    """Each key within ``MAX_KEY_LENGTH`` characters, the four of a store step (store name,
    store id, execution id, step key) too long together for the ledger's index: refused
    with a ``ValueError`` by every client, before user code, nothing written. Failed
    before: the in-memory and SQLite clients recorded the step, PostgreSQL raised an
    ``OperationalError`` (index row size exceeds btree maximum) that a run retries for
    ever."""
    name, id, execution_id, step_key = _ledger_keys(LEDGER_KEY_BYTES + 1)
    d = define_store(name, None, initial=never)
    try:
        c = harness.client
        step = StoreStepId(execution_id, step_key)
        snapshot = StoreSnapshot({}, "instance", 0)
        calls: list[Callable[[], Any]] = [
            lambda: c.update_store(d, id, updater=never, step_id=step),
            lambda: c.update_store_from(d, id, snapshot=snapshot, updater=never, step_id=step),
            lambda: c.take_from_store(d, id, selector=never, claim=None, step_id=step),
            lambda: c.delete_store_from(d, id, snapshot=snapshot, step_id=step),
        ]
        for call in calls:
            with pytest.raises(ValueError, match=f"{LEDGER_KEY_BYTES} bytes"):
                call()
        assert c.list_stores(d) == []
    finally:
        unregister_store(name)


def test_a_step_whose_keys_fill_the_ledger_key_is_recorded(harness: Any) -> None:
    name, id, execution_id, step_key = _ledger_keys(LEDGER_KEY_BYTES)
    d = define_store(name, None, initial=lambda id: {"n": 0})
    try:
        c = harness.client
        step = StoreStepId(execution_id, step_key)
        updated = c.update_store(d, id, updater=lambda s: s.update(n=1), step_id=step)
        assert c.update_store(d, id, updater=never, step_id=step) == updated
        assert c.get_store(d, id).version == 1
    finally:
        unregister_store(name)
