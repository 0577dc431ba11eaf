"""``step.patched(change_id)``: a branch point that keeps recorded executions on old code.

The decision is made once per execution and recorded in the heap under the key
``patch:<change_id>`` (kind ``patch``), so every later replay takes the same branch:

- ``True`` when the run reaches the call with every recorded step already replayed: the
  execution is at its frontier, so nothing recorded can disagree with the new code.
- ``False`` when recorded steps are still ahead of the call: the execution passed this
  point under code that had no patch, and must keep replaying the old branch.

A patch does not take a step index, so adding ``patched()`` does not shift the positional
keys of the steps after it. Recorded ``patch`` rows are ignored by the frontier test, so a
``patched()`` call can be removed once no execution that predates it is in flight.
"""

from __future__ import annotations

from typing import Any, Final

from ..core.durable import decode_durable
from ..models.runtime import StepKind
from .context import Kind, StepContext
from .outcomes import StepResult, StepValue

__all__ = ["PATCH", "PATCH_KEY_PREFIX", "decide", "patch_key"]

PATCH_KEY_PREFIX: Final = "patch:"


def patch_key(change_id: str) -> str:
    """The heap key of a patch decision."""
    return PATCH_KEY_PREFIX + change_id


def decide(ctx: StepContext) -> StepResult:
    """Make the decision of a patch reached for the first time and record it: ``True``
    unless a step other than a patch is recorded and not replayed yet (see module doc)."""
    decision = not any(row.kind != StepKind.PATCH for row in ctx.unreplayed())
    ctx.record("true" if decision else "false")
    return StepValue(decision)


def _replay(ctx: StepContext) -> Any:
    assert ctx.row is not None
    return bool(decode_durable(ctx.row.value_json))


#: Keyed ``patch:<change_id>`` (``Step.patched``), without a step index.
PATCH = Kind(
    StepKind.PATCH,
    decide,
    _replay,
    indexed=False,
    reused=(
        "patch {fingerprint!r} is checked twice in execution {execution!r}; each change id "
        "names one branch point"
    ),
)
