"""Waiting with a deadline: polling for a condition, joining a thread or a process.

For the tests that watch other threads or processes work (and the benchmarks, ``bench/``).
Every wait checks that what it waited for happened and fails naming it otherwise. A
deadline only bounds a hang, so it is generous (``HANG_SECONDS``): a loaded two-core
machine must never reach it. An event is waited for with
``assert event.wait(HANG_SECONDS), "what"``. It imports neither Django nor pytest.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

#: The deadline of a wait that only bounds a hang: what takes well under a second on an
#: idle machine may take many seconds on a loaded one.
HANG_SECONDS = 60.0


class Joinable(Protocol):
    """A ``threading.Thread`` or a ``multiprocessing.Process``."""

    def join(self, timeout: float | None = None) -> None: ...

    def is_alive(self) -> bool: ...


def wait_until(
    what: str, check: Callable[[], bool], timeout: float = HANG_SECONDS, *, interval: float = 0.05
) -> None:
    """Poll ``check`` every ``interval`` seconds until it holds; after ``timeout`` seconds
    raise ``AssertionError`` naming ``what``."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def join_or_fail(*workers: Joinable, what: str, timeout: float = HANG_SECONDS) -> None:
    """Join each of ``workers`` (threads or processes), within ``timeout`` seconds in all;
    raise ``AssertionError`` naming ``what`` if one is still running then."""
    deadline = time.monotonic() + timeout
    for worker in workers:
        worker.join(max(0.0, deadline - time.monotonic()))
        if worker.is_alive():
            raise AssertionError(f"{what} still running after {timeout:.0f}s")
