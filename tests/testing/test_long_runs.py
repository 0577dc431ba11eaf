"""A run that outlasts the lease keeper's renewal interval, in ``TestCase`` mode (one
transaction that never commits) and inside a caller's ``transaction.atomic``.

Everything such a run writes, its execution's lease included, is in a transaction no other
connection sees: the lease keeper, which renews from a connection of its own, would find
nothing to renew. ``LEASE_SECONDS`` is shortened (a renewal every 0.2 s) and the slow step
takes longer than the whole lease, as a 1-2 s step does with the default (4 s, a renewal
every second). On PostgreSQL and SQLite, whichever ``DATABASE_URL`` names.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.db import connections, transaction
from django.test import TestCase, override_settings

from tests.polling import HANG_SECONDS, join_or_fail
from yieldstar_django import get_execution, start_workflow
from yieldstar_django.models import WakeIntent
from yieldstar_django.runtime.executions import ResumeResult, run_execution
from yieldstar_django.testing import YieldstarTestMixin, run_until_idle
from yieldstar_django.testing.pytest_plugin import YieldstarHelper

from . import workflows
from .workflows import lease_left_after, slow_step

#: A lease of 0.6 s, renewed every 0.2 s.
LEASE = 0.6
#: The slow step: longer than the lease, so several renewals are due while it runs.
STEP = 0.8
#: A step that outlasts the lease by seconds, so that a worker woken once the lease
#: expired comes while it still runs, even on a loaded machine.
LONG_STEP = LEASE + 3.0


def short_lease(**more: object) -> override_settings:
    """``override_settings`` of ``YIELDSTAR`` with the short lease (other keys kept)."""
    current = getattr(settings, "YIELDSTAR", None) or {}
    return override_settings(YIELDSTAR={**current, "LEASE_SECONDS": LEASE, **more})


@pytest.fixture
def lease_of_a_moment() -> Iterator[None]:
    with short_lease():
        yield


def assert_completed_and_let_go(execution_id: str) -> None:
    execution = get_execution(execution_id)
    assert (execution.status, execution.result) == ("completed", STEP)
    assert (execution.lease_owner, execution.lease_expires_at) == ("", None)
    assert not WakeIntent.objects.filter(execution_id=execution_id, delivered_at=None).exists()


def test_a_slow_step_completes_in_a_test_transaction(
    db: None, yieldstar: YieldstarHelper, lease_of_a_moment: None
) -> None:
    """pytest-django's ``db``: the run outlasts the keeper's interval and completes, and
    ``run_until_idle`` counts it. Failed before on PostgreSQL: the keeper found no lease to
    renew (the row is in the test's transaction), declared it lost, and the run stopped
    with ``LeaseLost`` at its next step; ``run_until_idle`` returned as if idle, leaving the
    execution ``running`` with its lease held."""
    execution_id = start_workflow(slow_step, STEP)
    assert yieldstar.run_until_idle() == 1
    assert_completed_and_let_go(execution_id)
    assert yieldstar.run_until_idle() == 0


class SlowStepTestCaseTests(YieldstarTestMixin, TestCase):
    """``django.test.TestCase`` with the mixin: the same run completes (failed before on
    PostgreSQL, as the ``db`` test above)."""

    def setUp(self) -> None:
        super().setUp()
        overridden = short_lease()
        overridden.enable()
        self.addCleanup(overridden.disable)

    def test_a_slow_step_completes(self) -> None:
        execution_id = start_workflow(slow_step, STEP)
        self.assertEqual(self.run_until_idle(), 1)
        assert_completed_and_let_go(execution_id)


def test_a_slow_step_completes_inside_a_callers_atomic_block(
    transactional_db: None, lease_of_a_moment: None
) -> None:
    """``run_execution`` called inside ``transaction.atomic`` (outside tests too): the run
    completes within the block, and what it recorded commits with it. Failed before on
    PostgreSQL: the keeper could not see the lease the block took, declared it lost, and
    the run answered ``lost``, leaving the execution ``running`` with its lease held."""
    with short_lease(WAKE_BACKEND="tests.testing.workflows.deliver_nothing"):
        execution_id = start_workflow(slow_step, STEP)
        with transaction.atomic():
            assert run_execution(execution_id) == ResumeResult.FINISHED
    assert_completed_and_let_go(execution_id)


def test_no_worker_takes_over_a_run_inside_a_callers_atomic_block(
    transactional_db: None, lease_of_a_moment: None
) -> None:
    """A worker woken for an execution whose run, inside ``transaction.atomic`` in another
    thread (its own connection), is in a step longer than the lease, takes nothing over:
    it waits for that transaction to end, then finds the execution finished. Failed before
    on PostgreSQL: the keeper declared the run's lease lost, the run stopped at its next
    step and committed the execution ``running`` with its expired lease, and the woken
    worker took it over and ran it again."""
    with short_lease(WAKE_BACKEND="tests.testing.workflows.deliver_nothing"):
        execution_id = start_workflow(slow_step, LONG_STEP)

        answers: dict[str, ResumeResult] = {}
        ended: list[float] = []

        def run_in_a_transaction() -> None:
            try:
                with transaction.atomic():
                    answers["in the transaction"] = run_execution(execution_id)
            finally:
                ended.append(time.monotonic())
                connections.close_all()

        workflows.PAUSING.clear()
        runner = threading.Thread(target=run_in_a_transaction)
        runner.start()
        try:
            assert workflows.PAUSING.wait(HANG_SECONDS), (
                "the run in the transaction never started its step"
            )
            time.sleep(LEASE)  # its lease, as it took it, has expired; its step goes on
            woken_at = time.monotonic()
            answers["woken"] = run_execution(execution_id)
        finally:
            join_or_fail(runner, what="the runner")
    assert ended and woken_at < ended[0], "the woken worker came after the run ended"
    assert answers == {"in the transaction": ResumeResult.FINISHED, "woken": ResumeResult.GONE}
    execution = get_execution(execution_id)
    assert (execution.status, execution.result, execution.runs) == ("completed", LONG_STEP, 1)


@pytest.mark.parametrize(
    "mode",
    [
        pytest.param("test transaction", marks=pytest.mark.django_db),
        pytest.param("autocommit", marks=pytest.mark.django_db(transaction=True)),
    ],
)
def test_the_lease_is_live_at_every_step_after_a_slow_one(
    mode: str, lease_of_a_moment: None
) -> None:
    """The step after one longer than the whole lease starts with the lease renewed: in a
    test transaction the run renews it itself, on its own connection, before each step
    once a renewal is due (no other connection sees it); in autocommit the lease keeper
    renews it meanwhile, as in a worker."""
    with short_lease(WAKE_BACKEND="tests.testing.workflows.deliver_nothing"):
        execution_id = start_workflow(lease_left_after, STEP)
        assert run_until_idle() == 1
    execution = get_execution(execution_id)
    assert execution.status == "completed"
    assert 0 < execution.result <= LEASE
