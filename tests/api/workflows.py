"""A workflow the execution tests start (imported by their module)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from yieldstar_django.runtime import Step, workflow
from yieldstar_django.runtime.queues import define_queue


@workflow("api-test-greet")
def greet(step: Step, name: str, *, punctuation: str = "!") -> Generator[Any, Any, str]:
    """Sleep for a day, then greet: a start leaves it pending for the tests to look at."""
    yield from step.sleep(86400)
    return f"Hello, {name}{punctuation}"


#: The queue the API's queue tests start into: one at a time.
single = define_queue("api-test-single", concurrency=1)


def price(quantity: int) -> int:
    """A step function (its qualified name is the step's target)."""
    return quantity * 7
