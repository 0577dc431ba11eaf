"""Fixtures of the runtime tests: a ``rt`` harness that drives executions in-process.

The harness replaces Celery with a recorder (``WAKE_BACKEND`` = :func:`record_wakes`) and
runs ``run_execution`` for each recorded wake, delivering due timers with the connector's
``relay_once``. Store steps go through the database client when the connector exists and
through ``MemoryStoreClient`` too (``client_kind`` parameter).
"""

from __future__ import annotations

import importlib.util
import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from django.test import override_settings

from tests.polling import HANG_SECONDS
from yieldstar_django.core.definition import StoreDefinition, define_store, unregister_store
from yieldstar_django.core.memory import MemoryStoreClient
from yieldstar_django.core.results import Wake
from yieldstar_django.core.store import StoreClient
from yieldstar_django.models import Execution, ExecutionStep
from yieldstar_django.runtime import executions
from yieldstar_django.runtime.registry import Workflow, unregister_workflow, workflow

WAKES: list[Wake] = []

CLIENT_KINDS = ["memory"]
if importlib.util.find_spec("yieldstar_django.connector") is not None:
    CLIENT_KINDS.append("db")


def record_wakes(wakes: Sequence[Wake]) -> None:
    """A ``WAKE_BACKEND`` that only records (instead of enqueueing Celery tasks)."""
    WAKES.extend(wakes)


_names = itertools.count()


class Runtime:
    """Drives executions in this process; see the module docstring."""

    def __init__(self, client: StoreClient) -> None:
        self.client = client
        self.stores: list[str] = []
        self.workflows: list[str] = []
        self.resumes: list[tuple[str, str]] = []

    def name(self, prefix: str = "wf") -> str:
        return f"{prefix}-{next(_names)}"

    def define(self, initial: Any = None, schema: Any = None) -> StoreDefinition:
        name = self.name("store")
        self.stores.append(name)
        init = initial if initial is not None else (lambda id: {"items": []})
        return define_store(name, schema, initial=init)

    def workflow(self, fn: Callable[..., Any]) -> Workflow[Any, Any]:
        """Register ``fn`` as a workflow under a name unique to the test."""
        name = self.name("wf")
        self.workflows.append(name)
        return workflow(name)(fn)

    def pump(self) -> int:
        """Deliver due timers, then run every woken execution once; return runs made."""
        from yieldstar_django.wakes import relay_once

        relay_once()
        runs = 0
        while WAKES:
            pending = list(dict.fromkeys(w.execution_id for w in WAKES))
            WAKES.clear()
            for execution_id in pending:
                result = executions.run_execution(execution_id)
                self.resumes.append((execution_id, str(result)))
                runs += 1
        return runs

    def settle(
        self, until: Callable[[], bool] | None = None, *, timeout: float = HANG_SECONDS
    ) -> None:
        """Pump until ``until()`` holds (default: no wake is left), within ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            ran = self.pump()
            if until is None and not ran:
                return
            if until is not None and until():
                return
            if time.monotonic() > deadline:
                raise AssertionError("the executions did not settle before the deadline")
            if not ran:
                time.sleep(0.02)

    def nondeterminism_after(self, wf: Workflow[Any, Any], change: Callable[[], None]) -> str:
        """Start ``wf`` and run it until it waits, ``change()`` its code (a deploy), then
        settle it: it must fail with ``NonDeterminismError``, whose message this returns."""
        from yieldstar_django.runtime import get_execution, start_workflow

        eid = start_workflow(wf)
        self.pump()
        change()
        self.settle(lambda: get_execution(eid).is_finished)
        error = get_execution(eid).error
        assert error is not None and error["type"] == "NonDeterminismError", error
        return str(error["message"])

    def execution(self, execution_id: str) -> Execution:
        return Execution.objects.get(pk=execution_id)

    def steps(self, execution_id: str) -> dict[str, ExecutionStep]:
        return {s.step_key: s for s in ExecutionStep.objects.filter(execution_id=execution_id)}


@pytest.fixture(params=CLIENT_KINDS)
def client_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def rt(
    client_kind: str, transactional_db: None, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Runtime]:
    WAKES.clear()
    client: StoreClient
    if client_kind == "memory":
        client = MemoryStoreClient(on_wake=record_wakes)
    else:
        from yieldstar_django.connector import get_store_client

        client = get_store_client()
    monkeypatch.setattr(executions, "_store_client", lambda: client)
    harness = Runtime(client)
    settings = {
        "WAKE_BACKEND": "tests.runtime.conftest.record_wakes",
        "RELAY_DELAY": 0.0,
        "LEASE_SECONDS": 30,
    }
    with override_settings(YIELDSTAR=settings):
        yield harness
    WAKES.clear()
    for name in harness.stores:
        unregister_store(name)
    for name in harness.workflows:
        unregister_workflow(name)
