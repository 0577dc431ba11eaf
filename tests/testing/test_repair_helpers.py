"""Retrying and forking executions in tests: with the ``yieldstar`` fixture, and in a
``TestCase`` with ``YieldstarTestMixin`` (whose transaction never commits: the wakes of
a retry or a fork are run by ``run_until_idle``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import TestCase

from yieldstar_django import fork_execution, get_execution, retry_execution, start_workflow
from yieldstar_django.testing import YieldstarTestMixin
from yieldstar_django.testing.pytest_plugin import YieldstarHelper

from . import workflows


@pytest.fixture(autouse=True)
def _broken() -> Iterator[None]:
    workflows.FIXED.clear()
    workflows.CHARGES.clear()
    yield
    workflows.FIXED.clear()
    workflows.CHARGES.clear()


def test_retry_then_run_until_idle(transactional_db: None, yieldstar: YieldstarHelper) -> None:
    """With the inline backend a retry outside a transaction runs the execution as soon
    as it commits; ``run_until_idle`` has nothing left to do."""
    execution_id = start_workflow(workflows.order, "o-1")
    yieldstar.run_until_idle()
    assert get_execution(execution_id).status == "failed"
    workflows.FIXED.append(True)
    assert retry_execution(execution_id)
    assert yieldstar.run_until_idle() == 0
    execution = get_execution(execution_id)
    assert (execution.status, execution.result) == ("completed", ["reserved o-1", "charged o-1"])
    assert workflows.CHARGES == ["o-1"]


def test_fork_then_run_until_idle(db: None, yieldstar: YieldstarHelper) -> None:
    execution_id = start_workflow(workflows.order, "o-2")
    yieldstar.run_until_idle()
    workflows.FIXED.append(True)
    fork_id = fork_execution(execution_id, from_step=1)
    assert yieldstar.run_until_idle() == 1
    assert get_execution(fork_id).result == ["reserved o-2", "charged o-2"]
    assert get_execution(execution_id).status == "failed"


class RetryInATestCase(YieldstarTestMixin, TestCase):
    def setUp(self) -> None:
        super().setUp()
        workflows.FIXED.clear()
        workflows.CHARGES.clear()

    def test_a_retry_is_run_by_run_until_idle(self) -> None:
        execution_id = start_workflow(workflows.order, "o-3")
        self.run_until_idle()
        self.assertEqual(get_execution(execution_id).status, "failed")
        workflows.FIXED.append(True)
        self.assertTrue(retry_execution(execution_id))
        self.assertEqual(get_execution(execution_id).status, "pending")
        self.assertEqual(self.run_until_idle(), 1)
        self.assertEqual(get_execution(execution_id).status, "completed")
        self.assertEqual(workflows.CHARGES, ["o-3"])
