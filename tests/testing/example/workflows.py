from datetime import timedelta

from yieldstar_django import define_store, workflow


def validate_queue(state):
    if not isinstance(state, dict) or not isinstance(state.get("orders"), list):
        raise ValueError('a pick queue is {"orders": [...]}')


pick_queue = define_store("pick-queue", validate_queue, initial=lambda id: {"orders": []})


@workflow("pick-next")
def pick_next(step, warehouse):
    # Waits until an order is queued, then claims it.
    order = yield from step.take(
        pick_queue,
        warehouse,
        selector=lambda state: state["orders"][0] if state["orders"] else None,
        claim=lambda draft, order: draft["orders"].pop(0),
    )
    return order


@workflow("remind-tomorrow")
def remind_tomorrow(step, order):
    yield from step.sleep(timedelta(days=1))
    return f"reminded about {order}"
