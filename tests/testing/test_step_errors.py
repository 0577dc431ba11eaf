"""A ``step.run`` function that fails at the database (an ``IntegrityError``, say) in a
test transaction: the step's error fails the execution, as in a worker, and the test's
transaction stays usable. On PostgreSQL and SQLite, whichever ``DATABASE_URL`` names.
"""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction
from django.test import TestCase

from yieldstar_django import get_execution, start_workflow
from yieldstar_django.runtime.executions import ResumeResult, run_execution
from yieldstar_django.testing import YieldstarTestMixin
from yieldstar_django.testing.pytest_plugin import YieldstarHelper

from .workflows import add_user, add_user_durably


def assert_failed_on_the_database(execution_id: str) -> None:
    execution = get_execution(execution_id)
    assert execution.status == "failed"
    assert execution.error is not None
    assert execution.error["type"] == "django.db.utils:IntegrityError"


def test_a_step_failing_at_the_database_fails_its_execution(
    db: None, yieldstar: YieldstarHelper
) -> None:
    """pytest-django's ``db``: ``run_until_idle`` records the step's error and the test's
    transaction still answers queries."""
    User.objects.create(username="taken")
    execution_id = start_workflow(add_user, "taken")
    assert yieldstar.run_until_idle() == 1
    assert_failed_on_the_database(execution_id)
    assert list(User.objects.values_list("username", flat=True)) == ["taken"]


class StepErrorTestCaseTests(YieldstarTestMixin, TestCase):
    def test_a_step_failing_at_the_database_fails_its_execution(self) -> None:
        User.objects.create(username="taken")
        execution_id = start_workflow(add_user, "taken")
        self.assertEqual(self.run_until_idle(), 1)
        assert_failed_on_the_database(execution_id)
        self.assertEqual(User.objects.count(), 1)

    def test_other_executions_run_on_after_it(self) -> None:
        """The failed insert leaves nothing behind: another execution adds a free username
        in the same call."""
        User.objects.create(username="taken")
        failed = start_workflow(add_user, "taken")
        added = start_workflow(add_user, "free")
        self.assertEqual(self.run_until_idle(), 2)
        assert_failed_on_the_database(failed)
        self.assertEqual(get_execution(added).result, "free")
        self.assertEqual(sorted(User.objects.values_list("username", flat=True)), ["free", "taken"])

    def test_a_durable_block_in_a_step_runs_as_without_the_savepoint(self) -> None:
        """``TestCase`` allows a ``durable`` atomic block within its transaction: so does
        the savepoint around the step."""
        execution_id = start_workflow(add_user_durably, "durable")
        self.assertEqual(self.run_until_idle(), 1)
        self.assertEqual(get_execution(execution_id).result, "durable")
        self.assertTrue(User.objects.filter(username="durable").exists())

    def test_a_durable_block_in_a_step_is_refused_inside_the_tests_own_atomic_block(
        self,
    ) -> None:
        """Inside an ``atomic`` block of the test's own, Django refuses a ``durable`` block:
        so does the savepoint around the step, and the step fails with Django's error."""
        execution_id = start_workflow(add_user_durably, "durable")
        with transaction.atomic():
            self.assertEqual(self.run_until_idle(), 1)
        assert_refused_durable_block(execution_id)


def assert_refused_durable_block(execution_id: str) -> None:
    execution = get_execution(execution_id)
    assert execution.status == "failed"
    assert execution.error is not None
    assert execution.error["type"] == "builtins:RuntimeError"
    assert "durable atomic block cannot be nested" in execution.error["message"]
    assert not User.objects.filter(username="durable").exists()


def test_a_durable_block_in_a_step_is_refused_inside_a_callers_atomic_block(
    transactional_db: None,
) -> None:
    """Outside a test case's transaction the savepoint relaxes nothing: in a caller's
    ``transaction.atomic``, a ``durable`` block in a step raises Django's ``RuntimeError``,
    as it would without the savepoint; the step fails with it and the caller commits."""
    with transaction.atomic():
        execution_id = start_workflow(add_user_durably, "durable")
        assert run_execution(execution_id) == ResumeResult.FINISHED
    assert_refused_durable_block(execution_id)


def test_a_durable_block_in_a_step_runs_with_autocommit_off(transactional_db: None) -> None:
    """With autocommit off and no ``atomic`` block Django allows a ``durable`` block (it
    becomes a savepoint of the caller's transaction): so does the savepoint around the
    step, and the caller's commit keeps the row."""
    execution_id = start_workflow(add_user_durably, "durable")
    transaction.set_autocommit(False)
    try:
        assert run_execution(execution_id) == ResumeResult.FINISHED
        transaction.commit()
    finally:
        transaction.rollback()
        transaction.set_autocommit(True)
    assert get_execution(execution_id).result == "durable"
    assert User.objects.filter(username="durable").exists()


def test_run_execution_inside_a_callers_atomic_block(transactional_db: None) -> None:
    """``run_execution`` inside a ``transaction.atomic`` of the caller's: the step's error
    fails the execution and the caller's transaction commits."""
    User.objects.create(username="taken")
    with transaction.atomic():
        execution_id = start_workflow(add_user, "taken")
        assert run_execution(execution_id) == ResumeResult.FINISHED
    assert_failed_on_the_database(execution_id)
    assert User.objects.count() == 1
