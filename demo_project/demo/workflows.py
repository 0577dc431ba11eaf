"""The demo's workflows: an order pipeline.

- ``demo.picker`` — a fulfilment worker. It ``take``s the next new order from the queue
  on a lease (suspending while the queue is empty), marks it picked, starts ``demo.order``
  for it (an idempotent start: the execution id is the order id) and completes the lease.
  A picker killed while holding a lease does not keep the order: when the lease expires,
  the queue's ``release`` callback marks it new again. It stops when the queue closes.
- ``demo.order`` — one order: reserve stock, charge the card (a flaky gateway, retried on
  a durable timer), wait for a manager's approval if the order is large (a ``take_any``
  with a timeout on the order's approval store, which a person changes in the admin or
  through the API; no decision in time rejects it), then ship it or, if rejected, put the
  stock back. The timeout was added under ``step.patched("approval-timeout")``: orders
  already waiting when it was deployed keep the plain ``take``.
- ``demo.reminder`` — started for each approval: ``sleep``s, then nudges the approval if
  nobody has decided yet. It writes only the ``reminders`` field, so it does not wake the
  order (that waits on ``status``).

Imported at startup by yieldstar's autodiscovery in every process (web, worker, relay).
"""

from __future__ import annotations

import random
from typing import Any

from yieldstar_django import RetryableError, start_workflow, workflow
from yieldstar_django.runtime import Step

from .stores import APPROVAL_THRESHOLD, approvals, order_queue, shipping_log, stock

__all__ = ["order", "picker", "reminder"]

#: Seconds a large order waits for a manager before it is rejected.
APPROVAL_TIMEOUT_SECONDS = 3600.0
#: Seconds a picker holds an order before it goes back to the queue.
PICK_LEASE_SECONDS = 60.0

#: Chance that the payment gateway times out on an attempt (it is retried).
GATEWAY_TIMEOUT_RATE = 0.3


class GatewayTimeout(RetryableError):
    """The (simulated) payment gateway did not answer; try again in a second.

    Ten attempts: with a 30% timeout rate, five failed a charge in about one demo run in
    a hundred (0.3 ** 5 per charge), which read as a surprise; ten fail one in tens of
    thousands."""

    max_attempts = 10
    retry_interval = 1.0


class OutOfStock(Exception):
    """An order asks for more than the warehouse holds."""


# -- plain functions the steps call ---------------------------------------------------------


def next_new_order(queue: Any) -> Any:
    """Selector: the first new order; a ``{"closed": True}`` marker once the queue is closed
    and drained; ``None`` (wait) otherwise."""
    for candidate in queue["orders"]:
        if candidate["status"] == "new":
            return candidate
    return {"closed": True} if queue["closed"] else None


def decided(approval: Any) -> Any:
    """Selector: the manager's decision, or ``None`` (wait) while it is pending."""
    if approval["status"] == "pending":
        return None
    return {"status": approval["status"], "by": approval["decided_by"], "note": approval["note"]}


def charge_card(order_id: str, total: float) -> dict[str, Any]:
    """Charge the customer. Times out now and then (``GatewayTimeout`` is retried)."""
    if random.random() < GATEWAY_TIMEOUT_RATE:
        raise GatewayTimeout(f"payment gateway timed out charging {order_id}")
    return {"order": order_id, "charged": total, "reference": f"ch_{random.randrange(16**8):08x}"}


def reserve(lines: list[dict[str, Any]]) -> Any:
    """Updater factory: take every line's quantity from the stock, or raise OutOfStock."""

    def updater(levels: dict[str, int]) -> None:
        for line in lines:
            have = levels.get(line["sku"], 0)
            if have < line["qty"]:
                raise OutOfStock(f"{line['sku']}: {line['qty']} wanted, {have} in stock")
        for line in lines:
            levels[line["sku"]] -= line["qty"]

    return updater


def release(lines: list[dict[str, Any]]) -> Any:
    """Updater factory: put every line's quantity back."""

    def updater(levels: dict[str, int]) -> None:
        for line in lines:
            levels[line["sku"]] = levels.get(line["sku"], 0) + line["qty"]

    return updater


# -- workflows ------------------------------------------------------------------------------


@workflow("demo.picker")
def picker(step: Step, run: str, name: str) -> Any:
    """Take orders from the run's queue until it closes; start one ``demo.order`` each."""
    picked: list[str] = []
    while True:
        lease = yield from step.take(
            order_queue,
            run,
            next_new_order,
            lambda queue, chosen: (
                chosen.update(status="picked", picked_by=name) if "id" in chosen else None
            ),
            lease=PICK_LEASE_SECONDS,
            key=f"take-{len(picked)}",
        )
        taken = lease.value
        if taken.get("closed"):
            yield from step.complete(lease, key=f"done-{len(picked)}")
            return {"picker": name, "picked": picked}
        # The order as placed, without who picked it: a second pick (after an expired
        # lease) starts the same execution with the same arguments, which returns its id.
        details = {k: v for k, v in taken.items() if k not in ("status", "picked_by")}
        yield from step.run(
            start_workflow,
            "demo.order",
            run,
            details,
            execution_id=f"order-{taken['id']}",
            key=f"start-{taken['id']}",
        )
        # False if the lease expired first: the order went back to the queue, and the
        # order's idempotent start makes a second pick of it harmless.
        yield from step.complete(lease, key=f"done-{len(picked)}")
        picked.append(taken["id"])


@workflow("demo.order")
def order(step: Step, run: str, details: dict[str, Any]) -> Any:
    """Reserve, charge, get approval when large, then ship (or release the stock)."""
    order_id = details["id"]
    try:
        yield from step.update(stock, run, reserve(details["lines"]), key="reserve")
    except OutOfStock as exc:
        return {"order": order_id, "outcome": "out of stock", "why": str(exc)}

    payment = yield from step.run(charge_card, order_id, details["total"], key="charge")

    if details["total"] >= APPROVAL_THRESHOLD:
        yield from step.update(
            approvals,
            order_id,
            lambda a: a.update(total=details["total"]),
            key="request-approval",
        )
        yield from step.run(
            start_workflow,
            "demo.reminder",
            order_id,
            5,
            execution_id=f"reminder-{order_id}",
            key="start-reminder",
        )
        if (yield from step.patched("approval-timeout")):
            index, decision = yield from step.take_any(
                [(approvals, order_id, decided, None)],
                timeout=APPROVAL_TIMEOUT_SECONDS,
                key="approval",
            )
            if index is None:  # nobody decided in time
                decision = {"status": "rejected", "by": "timeout", "note": "no decision"}
        else:  # orders that were already waiting when the timeout was deployed
            decision = yield from step.take(approvals, order_id, decided, key="approval")
        if decision["status"] == "rejected":
            yield from step.update(stock, run, release(details["lines"]), key="release")
            return {
                "order": order_id,
                "outcome": "rejected",
                "by": decision["by"],
                "refund": payment["reference"],
            }

    shipped = yield from step.update(
        shipping_log, run, lambda log: log["shipped"].append(order_id), key="ship"
    )
    return {
        "order": order_id,
        "outcome": "shipped",
        "payment": payment["reference"],
        "shipping_log_version": shipped.version,
    }


@workflow("demo.reminder")
def reminder(step: Step, order_id: str, after_seconds: float) -> Any:
    """Sleep, then nudge the approval if it is still pending."""
    yield from step.sleep(after_seconds)
    snapshot = yield from step.get(approvals, order_id)
    if snapshot.state["status"] != "pending":
        return {"order": order_id, "reminded": False}
    yield from step.update(
        approvals, order_id, lambda a: a.update(reminders=a["reminders"] + 1), key="nudge"
    )
    return {"order": order_id, "reminded": True}
