"""``step_target``: what a recorded step ran on, read back from its fingerprint, as the
HTTP API's execution body and the admin's timeline name it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from yieldstar_django.core.definition import StoreDefinition, define_store, unregister_store
from yieldstar_django.runtime.steps import (
    DIGEST_MARK,
    _store_fingerprint,
    callable_name,
    fingerprint,
    step_target,
)


def charge(amount: int) -> int:
    return amount


@pytest.fixture
def slashed() -> Iterator[StoreDefinition]:
    """A store whose name holds "/": its fingerprints carry a digest."""
    definition = define_store("shop/stock", None, initial=lambda id: {})
    yield definition
    unregister_store(definition.name)


@pytest.fixture
def plain() -> Iterator[StoreDefinition]:
    definition = define_store("inventory", None, initial=lambda id: {})
    yield definition
    unregister_store(definition.name)


def test_function_steps_name_the_function() -> None:
    name = callable_name(charge)
    assert step_target("run", fingerprint(name)) == {"function": f"{__name__}.charge"}
    assert step_target("atomic", fingerprint(name)) == {"function": f"{__name__}.charge"}


def test_store_steps_name_the_store_and_id(plain: StoreDefinition) -> None:
    printed = _store_fingerprint(plain, "warehouse/1")
    for kind in ["take", "take_lease", "update", "get", "delete"]:
        assert step_target(kind, printed) == {"store": "inventory", "id": "warehouse/1"}


def test_a_store_name_holding_a_slash_is_read_back_by_the_registered_name(
    slashed: StoreDefinition,
) -> None:
    printed = _store_fingerprint(slashed, "a/b")
    assert DIGEST_MARK in printed
    assert step_target("update", printed) == {"store": "shop/stock", "id": "a/b"}


def test_take_any_names_each_choice() -> None:
    assert step_target("take_any", "inventory/w-1 | orders/o-2") == {
        "stores": [{"store": "inventory", "id": "w-1"}, {"store": "orders", "id": "o-2"}]
    }


def test_what_cannot_be_read_back_exactly_is_a_description() -> None:
    long_name = "pkg." + "x" * 600
    printed = fingerprint(long_name)
    assert DIGEST_MARK in printed
    target = step_target("run", printed)
    assert target is not None and set(target) == {"description"}
    assert long_name.startswith(target["description"])
    assert step_target("get", "no-slash-here") == {"description": "no-slash-here"}


def test_steps_that_name_nothing() -> None:
    for kind in ["sleep", "patch", "end_lease"]:
        assert step_target(kind, "anything") is None
