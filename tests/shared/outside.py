"""Support of ``test_outside_transactions``: a router that puts the runtime's tables on one
alias, a workflow run in-process under a lease, and a child process that dies inside a
step's commit.

Nothing here imports Django models at import time (the child imports this module before
it points the aliases at the test databases).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

#: The alias the runtime's tables are routed to (``None``: Django's default routing).
ALIAS: str | None = None


#: The app labels routed to :data:`ALIAS`: the app's, and the suite's own models (a
#: project's tables, which its ``step.atomic`` functions write with the app's).
ROUTED = frozenset({"yieldstar", "yieldstar_tests"})


class RuntimeRouter:
    """Sends every model of the app (label ``yieldstar``), and the suite's own models, to
    :data:`ALIAS`."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return ALIAS if model._meta.app_label in ROUTED else None

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        return ALIAS if model._meta.app_label in ROUTED else None


@contextmanager
def runtime_on(alias: str) -> Iterator[None]:
    """Use ``alias`` for the app (``DATABASE_ALIAS``) and route its tables there for the
    duration, as a project that keeps yieldstar on another database does."""
    global ALIAS
    from django.conf import settings
    from django.db import router
    from django.test import override_settings

    saved = router.routers
    ALIAS = alias
    router.routers = [RuntimeRouter(), *saved]
    try:
        with override_settings(
            YIELDSTAR={**getattr(settings, "YIELDSTAR", {}), "DATABASE_ALIAS": alias}
        ):
            yield
    finally:
        router.routers = saved
        ALIAS = None


def start(alias: str, workflow_id: str, execution_id: str) -> None:
    """Create a pending execution on ``alias`` (no wake: the test runs it itself)."""
    from yieldstar_django.models import Execution

    Execution.objects.using(alias).create(
        id=execution_id, workflow_id=workflow_id, input_json='{"args":[],"kwargs":{}}'
    )


def run_once(alias: str, workflow_id: str, execution_id: str) -> Any:
    """Take the lease and run the execution's workflow once in this thread; the outcome."""
    from yieldstar_django.connector import get_store_client
    from yieldstar_django.runtime.engine import Engine
    from yieldstar_django.runtime.leases import acquire_lease
    from yieldstar_django.runtime.registry import get_workflow

    lease = acquire_lease(execution_id)
    assert lease is not None, "the lease is free"
    return Engine(get_workflow(workflow_id), lease, get_store_client(alias)).run()


def define_counter(store_name: str, workflow_id: str) -> Callable[..., Any]:
    """A store ``{"n": 0}`` and a workflow that increments it once by a step."""
    from yieldstar_django.core.definition import define_store, get_definition
    from yieldstar_django.runtime.registry import workflow

    store = get_definition(store_name) or define_store(
        store_name, None, initial=lambda id: {"n": 0}
    )

    def counter(step: Any) -> Any:
        result = yield from step.update(store, "s", lambda d: d.update(n=d["n"] + 1), key="inc")
        return result.version

    return workflow(workflow_id)(counter)


def die_in_commit(
    db_names: dict[str, str], alias: str, store_name: str, workflow_id: str, execution_id: str
) -> None:
    """Child process: run the counter workflow and ``os._exit(17)`` inside the step's
    commit, after the store's statements and before the heap row."""
    from tests.shared.workers import setup_django

    setup_django(db_names, {})
    with runtime_on(alias):
        from yieldstar_django.runtime.context import RunState

        define_counter(store_name, workflow_id)
        original = RunState.write

        def write_then_die(self: Any, *args: Any, **kwargs: Any) -> None:
            from django.db import connections

            assert connections[alias].in_atomic_block, "the heap row is in the commit"
            os._exit(17)
            original(self, *args, **kwargs)  # pragma: no cover

        RunState.write = write_then_die  # type: ignore[method-assign]
        run_once(alias, workflow_id, execution_id)
    os._exit(0)  # the step did not reach its heap row
