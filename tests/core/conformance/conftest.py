"""Fixtures of the conformance suite: one ``harness`` per client kind, fresh per test."""

from __future__ import annotations

import importlib.util
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from yieldstar_django.core.definition import StoreDefinition, define_store, unregister_store

from .harness import MemoryHarness

HARNESSES = ["memory"]
if importlib.util.find_spec("tests.core.conformance.db_harness") is not None:
    HARNESSES += ["postgres", "postgres-statements", "sqlite"]

_names = itertools.count()


@pytest.fixture(params=HARNESSES)
def harness(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "memory":
        yield MemoryHarness()
        return
    from . import db_harness

    yield from db_harness.make_harness(request, request.param)


DefineStore = Callable[..., StoreDefinition]


@pytest.fixture
def define() -> Iterator[DefineStore]:
    """``define(initial=..., schema=None)``: a store definition with a name unique to the test."""
    names: list[str] = []

    def make(initial: Any = None, schema: Any = None, **kwargs: Any) -> StoreDefinition:
        name = f"conf{next(_names)}"
        names.append(name)
        init = initial if initial is not None else (lambda id: {"items": [], "count": 0})
        return define_store(name, schema, initial=init, **kwargs)

    yield make
    for name in names:
        unregister_store(name)
