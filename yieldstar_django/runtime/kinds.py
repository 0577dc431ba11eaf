"""Every step kind the engine runs, by name (``StepCall.kind``, the heap row's ``kind``).

A new kind is a module written against :mod:`yieldstar_django.runtime.context` (its
:class:`~yieldstar_django.runtime.context.Kind` and the step primitive that yields its
``StepCall``) and one entry here; see ``docs/internals/architecture.md#adding-a-step-kind``.
"""

from __future__ import annotations

from typing import Final

from . import atomic_steps, children, claim_leases, patches, plain_steps, store_steps, take_any
from .context import Kind

__all__ = ["KINDS"]

KINDS: Final[dict[str, Kind]] = {
    kind.name: kind
    for kind in (
        plain_steps.RUN,
        atomic_steps.ATOMIC,
        plain_steps.SLEEP,
        store_steps.TAKE,
        store_steps.UPDATE,
        store_steps.GET,
        store_steps.DELETE,
        claim_leases.TAKE_LEASE,
        claim_leases.END_LEASE,
        take_any.TAKE_ANY,
        patches.PATCH,
        children.START,
        children.WAIT,
    )
}
