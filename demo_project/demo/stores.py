"""The demo's shared stores: an order queue, one approval per large order, stock levels
and a shipping log.

Each is a named JSON document with a schema. Workflows change them with ``step.take`` and
``step.update``; a person changes an approval through the admin or the HTTP API, and the
schema rejects anything but ``pending``/``approved``/``rejected``.
"""

from __future__ import annotations

from typing import Any

from yieldstar_django import define_store

__all__ = [
    "APPROVAL_THRESHOLD",
    "INITIAL_STOCK",
    "approvals",
    "order_queue",
    "shipping_log",
    "stock",
]

#: Orders whose total reaches this need a manager's approval.
APPROVAL_THRESHOLD = 500

#: What the warehouse holds when a run of the demo starts.
INITIAL_STOCK: dict[str, int] = {"kettle": 20, "toaster": 12, "espresso-machine": 3, "mug": 200}

_ORDER = {
    "type": "object",
    "required": ["id", "customer", "lines", "total", "status"],
    "properties": {
        "id": {"type": "string"},
        "customer": {"type": "string"},
        "lines": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["sku", "qty", "price"],
                "properties": {
                    "sku": {"type": "string"},
                    "qty": {"type": "integer", "minimum": 1},
                    "price": {"type": "number", "minimum": 0},
                },
            },
        },
        "total": {"type": "number", "minimum": 0},
        "status": {"enum": ["new", "picked"]},
        "picked_by": {"type": ["string", "null"]},
    },
}


def unpick(queue: Any, order: Any) -> None:
    """Release callback of a picker's lease: the order is new again (the queue's closed
    marker has nothing to hand back)."""
    for candidate in queue["orders"]:
        if "id" in order and candidate["id"] == order["id"]:
            candidate.update(status="new", picked_by=None)


#: ``order-queue/<run>``: orders pushed by the shop, picked by fulfilment workers (on a
#: lease: an order whose picker dies goes back to ``new``).
order_queue = define_store(
    "demo.order-queue",
    {
        "type": "object",
        "required": ["orders", "closed"],
        "properties": {
            "orders": {"type": "array", "items": _ORDER},
            "closed": {"type": "boolean"},
        },
    },
    initial=lambda id: {"orders": [], "closed": False},
    release=unpick,
)

#: ``approval/<order id>``: a manager approves or rejects a large order here.
approvals = define_store(
    "demo.approval",
    {
        "type": "object",
        "required": ["order", "status"],
        "properties": {
            "order": {"type": "string"},
            "total": {"type": "number"},
            "status": {"enum": ["pending", "approved", "rejected"]},
            "decided_by": {"type": ["string", "null"]},
            "note": {"type": "string"},
            "reminders": {"type": "integer", "minimum": 0},
        },
    },
    initial=lambda id: {
        "order": id,
        "total": 0,
        "status": "pending",
        "decided_by": None,
        "note": "",
        "reminders": 0,
    },
)


def _check_stock(value: Any) -> None:
    if not isinstance(value, dict):
        raise ValueError("stock is an object of sku -> quantity")
    for sku, qty in value.items():
        if not isinstance(qty, int) or isinstance(qty, bool) or qty < 0:
            raise ValueError(f"stock of {sku!r} must be a whole number >= 0, not {qty!r}")


#: ``stock/<run>``: quantities on hand; reservations take from it, rejections put back.
stock = define_store("demo.stock", _check_stock, initial=lambda id: dict(INITIAL_STOCK))

#: ``shipping-log/<run>``: what left the warehouse, in order.
shipping_log = define_store(
    "demo.shipping-log",
    {"type": "object", "required": ["shipped"], "properties": {"shipped": {"type": "array"}}},
    initial=lambda id: {"shipped": []},
)
