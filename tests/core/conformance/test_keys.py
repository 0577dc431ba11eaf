"""Keys a store call is given: what the tables cannot hold (a store name or id, an
execution id, a step key or a workflow id past ``MAX_KEY_LENGTH`` characters, holding
``"\\x00"`` or a lone surrogate, or not a ``str``; a waiter's ``since_version`` that is
not an ``int`` or past a PostgreSQL ``bigint``) is refused by every client alike, with a
``StoreKeyError`` naming the key and the rule it breaks (also a ``TypeError`` for a key of
the wrong type), before any user code or SQL runs, and nothing is written. A key of
exactly ``MAX_KEY_LENGTH`` characters is accepted. So is a store step whose four keys hold
``MAX_LEDGER_KEY_BYTES`` bytes of UTF-8 together, and not one more.

Failed before on the in-memory client, which accepted every one of them: unit tests on
it passed where the database clients refuse the call. The errors were a bare
``ValueError`` or ``TypeError``, and a bad ``since_version`` reached PostgreSQL (a
database error) while the in-memory client accepted it.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import Any

import pytest

from yieldstar_django import StoreKeyError
from yieldstar_django.core.constants import MAX_KEY_LENGTH, MAX_LEDGER_KEY_BYTES, MAX_VERSION
from yieldstar_django.core.definition import define_store, unregister_store
from yieldstar_django.core.errors import StoreKeyTypeError
from yieldstar_django.core.results import StoreSnapshot, StoreStepId, StoreWaiter

LONG = "k" * (MAX_KEY_LENGTH + 1)
FULL = "k" * MAX_KEY_LENGTH

#: (label, bad key, the rule it breaks, what its message says).
BAD_KEYS: list[tuple[str, Any, str, str]] = [
    ("too long", LONG, "length", f"is longer than {MAX_KEY_LENGTH} characters"),
    ("nul", "a\x00b", "nul", 'cannot hold "\\x00"'),
    ("surrogate", "a\ud800", "surrogate", "cannot hold a lone surrogate"),
    ("not a str", 7, "type", "must be a str, not int"),
]
BAD_IDS = [pytest.param(*bad, id=bad[0]) for bad in BAD_KEYS]
#: A store name that is not a ``str`` is ``define_store``'s to refuse.
BAD_NAMES = [pytest.param(*bad, id=bad[0]) for bad in BAD_KEYS if isinstance(bad[1], str)]


def refused(label: str, limit: str, message: str) -> Any:
    """``pytest.raises`` of the ``StoreKeyError`` a bad key gets: it names the key
    (``label``) and the rule (``limit``); one of the wrong type is also a ``TypeError``,
    the others are not."""
    return pytest.raises(
        StoreKeyTypeError if limit == "type" else StoreKeyError,
        match=re.escape(f"{label} {message}"),
    )


def check_refusal(info: Any, label: str, limit: str) -> None:
    error = info.value
    assert (error.label, error.limit) == (label, limit)
    assert isinstance(error, ValueError)
    assert isinstance(error, TypeError) == (limit == "type")


def never(*args: Any) -> Any:
    raise AssertionError("user code ran for a call that must be refused first")


@pytest.mark.parametrize(("case", "bad", "limit", "message"), BAD_IDS)
def test_a_bad_store_id_is_refused_and_creates_nothing(
    harness: Any, define: Any, case: str, bad: Any, limit: str, message: str
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
        with refused("store id", limit, message) as info:
            call()
        check_refusal(info, "store id", limit)
    assert c.list_stores(d) == []


@pytest.mark.parametrize(("case", "bad", "limit", "message"), BAD_NAMES)
def test_a_bad_store_name_is_refused_and_creates_nothing(
    harness: Any, case: str, bad: str, limit: str, message: str
) -> None:
    d = define_store(bad, None, initial=never)
    try:
        with refused("store name", limit, message) as info:
            harness.client.get_store(d, "a")
        check_refusal(info, "store name", limit)
        with refused("store name", limit, message):
            harness.client.list_stores(d)
    finally:
        unregister_store(bad)


@pytest.mark.parametrize(("case", "bad", "limit", "message"), BAD_IDS)
@pytest.mark.parametrize("part", ["step execution id", "step key"])
def test_a_bad_step_id_is_refused_before_user_code_and_changes_nothing(
    harness: Any, define: Any, part: str, case: str, bad: Any, limit: str, message: str
) -> None:
    d = define(initial=lambda id: {"items": [1], "count": 0})
    c = harness.client
    before = c.get_store(d, "a")
    step = StoreStepId(bad, "s") if part == "step execution id" else StoreStepId("e", bad)
    with refused(part, limit, message) as info:
        c.update_store(d, "a", updater=never, step_id=step)
    check_refusal(info, part, limit)
    with refused(part, limit, message):
        c.take_from_store(d, "a", selector=never, claim=None, step_id=step)
    assert c.get_store(d, "a") == before
    assert len(harness.changed_paths(d, "a")) == 0


@pytest.mark.parametrize(("case", "bad", "limit", "message"), BAD_IDS)
@pytest.mark.parametrize("part", ["workflow id", "execution id", "step key"])
def test_a_waiter_with_a_bad_key_is_refused_and_not_registered(
    harness: Any, define: Any, part: str, case: str, bad: Any, limit: str, message: str
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
    with refused(part, limit, message) as info:
        c.register_waiter(waiter)
    check_refusal(info, part, limit)
    assert harness.waiters(d, "q") == []
    assert harness.wakes == []
    if part != "workflow id":
        removal = {"execution id": (bad, None), "step key": ("e", bad)}[part]
        with refused(part, limit, message):
            c.remove_waiters(*removal)


#: ``since_version`` values no client may register: (case, value, rule).
BAD_VERSIONS = [
    pytest.param(2**63, "range", id="past a bigint"),
    pytest.param(10**5000, "range", id="of 5000 digits"),
    pytest.param(-1, "range", id="negative"),
    pytest.param(None, "type", id="None"),
    pytest.param(True, "type", id="True"),
    pytest.param(False, "type", id="False"),
    pytest.param(1.0, "type", id="float"),
    pytest.param("0", "type", id="str"),
]


@pytest.mark.parametrize(("since_version", "limit"), BAD_VERSIONS)
def test_a_waiter_with_a_bad_since_version_is_refused_before_any_sql(
    harness: Any, define: Any, since_version: Any, limit: str
) -> None:
    """PostgreSQL raised a raw database error for ``2**63``, ``None`` or ``True`` where
    the in-memory client accepted them (``True`` even passed for version 1): every client
    refuses them now, before any statement, registering nothing and waking no one."""
    d = define()
    c = harness.client
    missed = c.take_from_store(d, "q", selector=lambda s: None, claim=None)
    waiter = StoreWaiter("wf", "e", "s", d.name, "q", missed.instance_id, since_version, ())
    with pytest.raises(StoreKeyError, match="since_version must be") as info:
        c.register_waiter(waiter)
    check_refusal(info, "since_version", limit)
    assert harness.waiters(d, "q") == []
    assert harness.wakes == []
    # The client is still usable (no aborted transaction left behind).
    c.register_waiter(
        StoreWaiter("wf", "e", "s", d.name, "q", missed.instance_id, missed.version, ())
    )
    assert [w.since_version for w in harness.waiters(d, "q")] == [missed.version]


def test_the_largest_since_version_is_registered_and_woken_as_stale(
    harness: Any, define: Any
) -> None:
    """``MAX_VERSION`` (the largest ``bigint``) is a version the tables hold: accepted, and
    being not current, woken at once."""
    d = define()
    c = harness.client
    missed = c.take_from_store(d, "q", selector=lambda s: None, claim=None)
    c.register_waiter(StoreWaiter("wf", "e", "s", d.name, "q", missed.instance_id, MAX_VERSION, ()))
    assert [w.execution_id for w in harness.wakes] == ["e"]


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
    with a ``StoreKeyError`` (``limit == "ledger"``) by every client, before user code,
    nothing written. Failed
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
            with pytest.raises(StoreKeyError, match=f"{LEDGER_KEY_BYTES} bytes") as info:
                call()
            check_refusal(info, "store step", "ledger")
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
