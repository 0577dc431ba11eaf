"""Waiting by polling with a deadline, for the code that watches other processes work:
the end-to-end and fault suites (``tests/e2e``, ``tests/faults``) and the benchmarks
(``bench/``). It imports neither Django nor pytest."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(
    what: str, check: Callable[[], bool], timeout: float = 60.0, *, interval: float = 0.05
) -> None:
    """Poll ``check`` every ``interval`` seconds until it holds; after ``timeout`` seconds
    raise ``AssertionError`` naming ``what``."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
