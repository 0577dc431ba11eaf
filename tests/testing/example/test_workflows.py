from django.test import TestCase, TransactionTestCase

from yieldstar_django import get_execution, get_store_client, start_workflow
from yieldstar_django.testing import YieldstarTestMixin

from .workflows import pick_next, pick_queue, remind_tomorrow


def add_order(order):
    return lambda draft: draft["orders"].append(order)


class PickNextTests(YieldstarTestMixin, TestCase):
    # One transaction per test that never commits: run_until_idle() runs what is due.

    def test_a_new_order_wakes_the_picker(self):
        execution_id = start_workflow(pick_next, "north")
        self.run_until_idle()
        self.assertEqual(get_execution(execution_id).status, "waiting")

        get_store_client().update_store(pick_queue, "north", updater=add_order("order-1"))
        self.assertEqual(self.run_until_idle(), 1)

        execution = get_execution(execution_id)
        self.assertEqual(execution.status, "completed")
        self.assertEqual(execution.result, "order-1")

    def test_a_one_day_sleep(self):
        execution_id = start_workflow(remind_tomorrow, "order-1")
        self.run_until_idle()
        self.assertEqual(get_execution(execution_id).status, "sleeping")

        self.advance_time(23 * 3600)
        self.assertEqual(self.run_until_idle(), 0)  # not due yet
        self.advance_time(3600)
        self.assertEqual(self.run_until_idle(), 1)

        self.assertEqual(get_execution(execution_id).result, "reminded about order-1")


class PickNextCommitTests(YieldstarTestMixin, TransactionTestCase):
    # Every write commits: a woken execution runs as soon as the write commits.

    def test_a_new_order_wakes_the_picker(self):
        execution_id = start_workflow(pick_next, "south")
        self.assertEqual(get_execution(execution_id).status, "waiting")

        get_store_client().update_store(pick_queue, "south", updater=add_order("order-2"))

        self.assertEqual(get_execution(execution_id).result, "order-2")
