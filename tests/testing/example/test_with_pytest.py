from yieldstar_django import get_execution, get_store_client, start_workflow

from .workflows import pick_next, pick_queue, remind_tomorrow


def test_a_new_order_wakes_the_picker(db, yieldstar):
    execution_id = start_workflow(pick_next, "east")
    yieldstar.run_until_idle()

    get_store_client().update_store(
        pick_queue, "east", updater=lambda draft: draft["orders"].append("order-3")
    )
    assert yieldstar.run_until_idle() == 1
    assert get_execution(execution_id).result == "order-3"


def test_a_one_day_sleep(transactional_db, yieldstar):
    execution_id = start_workflow(remind_tomorrow, "order-4")  # runs at once: it committed
    assert get_execution(execution_id).status == "sleeping"

    yieldstar.advance_time(24 * 3600)
    assert yieldstar.run_until_idle() == 1
    assert get_execution(execution_id).status == "completed"
