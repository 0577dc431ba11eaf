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

from typing import TYPE_CHECKING, Final

from ..core.durable import decode_durable
from ..models.runtime import StepKind, StepStatus
from .errors import NonDeterminismError, StepKeyError

if TYPE_CHECKING:
    from .engine import Engine
    from .steps import StepCall

__all__ = ["PATCH_KEY_PREFIX", "decide", "patch_key"]

PATCH_KEY_PREFIX: Final = "patch:"


def patch_key(change_id: str) -> str:
    """The heap key of a patch decision."""
    return PATCH_KEY_PREFIX + change_id


def decide(engine: Engine, call: StepCall) -> bool:
    """Return the recorded decision for ``call``, or make and record it (see module doc)."""
    assert call.key is not None
    key = call.key
    if key in engine.used:
        raise StepKeyError(
            f"patch {key[len(PATCH_KEY_PREFIX) :]!r} is checked twice in execution "
            f"{engine.execution.id!r}; each change id names one branch point"
        )
    engine.used.add(key)
    row = engine.heap.get(key)
    if row is not None:
        if row.kind != StepKind.PATCH:
            raise NonDeterminismError.at(
                engine.execution.id,
                key,
                recorded=(row.kind, row.fingerprint),
                replayed=(call.kind, call.fingerprint),
            )
        return bool(decode_durable(row.value_json))
    ahead = [k for k, r in engine.heap.items() if k not in engine.used and r.kind != StepKind.PATCH]
    decision = not ahead
    value_json = "true" if decision else "false"
    engine._write(
        call, key, engine.position, None, status=StepStatus.COMPLETED, value_json=value_json
    )
    return decision
