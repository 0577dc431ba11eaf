"""Fixtures on real PostgreSQL and SQLite and in real processes, for the tests of every
part (a plugin of ``tests/conftest.py``).


``alias`` parametrizes a test over both databases (``default`` must be PostgreSQL for the
``postgres`` case, which is skipped otherwise). ``wakes`` points ``WAKE_BACKEND`` at a list.
``spawn`` runs worker functions (:mod:`tests.shared.workers`) in child processes, each
with its own database connection (forked from a server that set Django up once, never from
the test process, whose connections must not be shared).
"""

from __future__ import annotations

import multiprocessing
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from django.conf import settings
from django.db import connections
from django.test.utils import override_settings

from tests.polling import HANG_SECONDS
from yieldstar_django.core.results import Wake

from . import workers


def db(*aliases: str) -> pytest.MarkDecorator:
    """A transactional test on ``aliases`` (so ``on_commit`` fires); it ends by emptying
    their tables (``tests/shared/reset.py``)."""
    return pytest.mark.django_db(transaction=True, databases=list(aliases))


POSTGRES = pytest.param("default", id="postgres", marks=[pytest.mark.postgres, db("default")])
SQLITE = pytest.param("sqlite", id="sqlite", marks=[db("sqlite")])
BOTH = [POSTGRES, SQLITE]


@pytest.fixture(params=BOTH)
def alias(request: pytest.FixtureRequest) -> str:
    """A database alias: ``default`` (PostgreSQL) or ``sqlite``."""
    return str(request.param)


class WakeCollector(list[Wake]):
    """The ``WAKE_BACKEND`` of a test; set ``fail`` to make deliveries raise."""

    fail: BaseException | None = None

    def __call__(self, wakes: Sequence[Wake]) -> None:
        if self.fail is not None:
            raise self.fail
        self.extend(Wake(w.execution_id, w.workflow_id) for w in wakes)


#: How long a ``BlockingBackend`` blocks at most (tests release it sooner): what a test
#: does while it blocks must be done by then, even on a loaded machine.
BLOCK_SECONDS = HANG_SECONDS


class BlockingBackend:
    """A ``WAKE_BACKEND`` that records its wakes, then blocks until ``release`` is set (at
    most ``BLOCK_SECONDS``), then raises ``fail`` if it is set: a broker slow to answer.
    ``entered`` is set once it blocks, ``returned`` once it is done; ``calls`` counts."""

    def __init__(self, fail: BaseException | None = None) -> None:
        self.fail = fail
        self.calls = 0
        self.wakes: list[Wake] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.returned = threading.Event()

    def __call__(self, wakes: Sequence[Wake]) -> None:
        self.calls += 1
        self.wakes.extend(wakes)
        self.entered.set()
        try:
            self.release.wait(BLOCK_SECONDS)
        finally:
            self.returned.set()
        if self.fail is not None:
            raise self.fail


@pytest.fixture
def wakes() -> Iterator[WakeCollector]:
    collector = WakeCollector()
    with override_settings(
        YIELDSTAR={**getattr(settings, "YIELDSTAR", {}), "WAKE_BACKEND": collector}
    ):
        yield collector


def configure(**yieldstar: Any) -> Any:
    """``override_settings`` of some ``YIELDSTAR`` keys, keeping the others."""
    return override_settings(YIELDSTAR={**getattr(settings, "YIELDSTAR", {}), **yieldstar})


def database_names() -> dict[str, str]:
    """The database names of every alias now (the test databases, once set up)."""
    return {alias: str(connections[alias].settings_dict["NAME"]) for alias in settings.DATABASES}


#: In ``spawn`` arguments, replaced by a barrier shared by all the children of the call.
SHARED_BARRIER = "<shared barrier>"

Spawn = Callable[..., list[Any]]


def _context() -> Any:
    """The ``forkserver`` context, whose server has imported ``tests.shared.preload``
    (Django set up, no connection open), so a worker starts in milliseconds, not seconds."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["tests.shared.preload"])
    return ctx


@pytest.fixture
def spawn() -> Spawn:
    """``spawn(function, [args, ...], yieldstar={}, barrier=True, timeout=120)``: run
    ``workers.<function>(*args)`` in one child process per args tuple, started together
    behind a barrier; return their results in order. A child's exception fails the test.
    ``function`` may also be a list, one name per args tuple. An argument equal to
    ``SHARED_BARRIER`` becomes a barrier shared by the children. With ``expect_exit`` the
    children must end with that exit code instead of returning."""

    def run(
        function: str | Sequence[str],
        arg_tuples: Sequence[tuple[Any, ...]],
        *,
        yieldstar: dict[str, Any] | None = None,
        barrier: bool = True,
        timeout: float = 120,
        expect_exit: int | None = None,
    ) -> list[Any]:
        ctx = _context()
        results = ctx.Queue()
        start = ctx.Barrier(len(arg_tuples), timeout=HANG_SECONDS) if barrier else None
        shared = ctx.Barrier(len(arg_tuples), timeout=HANG_SECONDS)
        names = database_names()
        functions = [function] * len(arg_tuples) if isinstance(function, str) else function
        processes = [
            ctx.Process(
                target=workers.entry,
                args=(
                    functions[index],
                    names,
                    yieldstar or {},
                    start,
                    results,
                    index,
                    tuple(shared if a == SHARED_BARRIER else a for a in args),
                ),
                daemon=True,
            )
            for index, args in enumerate(arg_tuples)
        ]
        for process in processes:
            process.start()
        if expect_exit is not None:
            for process in processes:
                process.join(timeout=timeout)
                if process.is_alive():
                    process.kill()
                    pytest.fail(f"worker {function} did not exit within {timeout}s")
                assert process.exitcode == expect_exit, results.get(timeout=1)
            return []
        outcomes: dict[int, Any] = {}
        try:
            while len(outcomes) < len(processes):
                try:
                    index, status, value = results.get(timeout=timeout)
                except queue.Empty:
                    pytest.fail(f"worker {function} did not finish within {timeout}s")
                if status == "error":
                    pytest.fail(f"worker {function}[{index}] failed:\n{value}")
                outcomes[index] = value
        finally:
            for process in processes:
                process.join(timeout=30)
                if process.is_alive():
                    process.kill()
        return [outcomes[i] for i in range(len(processes))]

    return run
