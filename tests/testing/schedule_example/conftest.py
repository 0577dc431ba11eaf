"""The example's schedules are defined for its own tests only: imported by a fixture and
forgotten afterwards, so no other test of the suite sees their ticks (a project imports
its ``schedules`` module at startup instead)."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from types import ModuleType

import pytest

from yieldstar_django.runtime.schedule_specs import unregister_schedule


@pytest.fixture(autouse=True)
def report_schedules() -> Iterator[ModuleType]:
    module = importlib.reload(importlib.import_module("tests.testing.schedule_example.schedules"))
    yield module
    for name in ("nightly-report", "refresh-cache"):
        unregister_schedule(name)
