from yieldstar_django import get_execution, start_workflow
from yieldstar_django.models import Execution

from .workflows import check_sku, price_catalog, slow_report


def test_a_parent_gathers_its_children(transactional_db, yieldstar):
    execution_id = start_workflow(price_catalog, ["ab", "abc", "abcd"])
    yieldstar.run_until_idle()

    parent = get_execution(execution_id)
    assert parent.result == 900
    assert parent.runs == 2  # its start, and once when the last child finished
    assert Execution.objects.filter(parent=execution_id).count() == 3


def test_a_failed_child_raises_in_its_parent(transactional_db, yieldstar):
    execution_id = start_workflow(check_sku, "zz")
    yieldstar.run_until_idle()
    assert get_execution(execution_id).result == "builtins:ValueError: unknown sku zz"


def test_a_deadline_cancels_the_tree(transactional_db, yieldstar):
    execution_id = start_workflow(slow_report)
    yieldstar.run_until_idle()

    yieldstar.advance_time(61)
    yieldstar.run_until_idle()
    execution = get_execution(execution_id)
    assert execution.status == "cancelled"
    assert execution.error["type"] == "DeadlineExceededError"
