"""Running application code on store states: ``initial``, updaters, selectors' claims and
schemas, and the durable encoding of what they produce.

Every function here is pure computation over decoded values; none touches storage. The
CAS loop (:mod:`.cas`) calls them outside any storage transaction.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .commits import StoredState, StoreMutation
from .definition import StoreDefinition
from .drafts import WriteLog, build_draft, detach
from .durable import (
    DurableLimits,
    check_durable,
    decode_durable,
    encode_checked,
    encode_durable,
    encode_placed,
)
from .errors import CorruptStateError, StoreValidationError
from .paths import diff_stored
from .results import LedgerOperation, StoreStepId, StoreTakeUnmatched, take_record, update_record
from .selectors import track_selector, unwrap_selected
from .store import Claim, Replacement, Selector, Updater, is_selector_match
from .types import StorePath

__all__ = [
    "Attempt",
    "call_sync",
    "decode_stored",
    "finalize",
    "plan_take",
    "plan_update",
    "prepare_update",
    "require_sync",
    "validate_state",
]


def require_sync(fn: Any, role: str) -> None:
    """Raise ``TypeError`` for an async callable given as a store ``role``."""
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        raise TypeError(f"Store {role}s must be synchronous; {fn!r} is async")


def call_sync(fn: Callable[..., Any], role: str, *args: Any) -> Any:
    """``fn(*args)``; an awaitable result is closed and refused with ``TypeError``."""
    result = fn(*args)
    if inspect.isawaitable(result):
        close = getattr(result, "close", None)
        if close is not None:
            close()
        raise TypeError(f"Store {role}s must be synchronous; {fn!r} returned an awaitable")
    return result


def state_label(definition: StoreDefinition) -> str:
    return f'Store state for "{definition.name}"'


def run_schema(
    definition: StoreDefinition, value: Any, limits: DurableLimits, step_key: str
) -> Any:
    """The schema's output for ``value``; a value too deep for the schema to walk is
    reported as the durability check would report it."""
    try:
        return definition.validator(value)
    except RecursionError:
        check_durable(value, limits=limits, step_key=step_key, label=state_label(definition))
        raise StoreValidationError(
            definition.name, [{"message": "the state nests too deeply", "path": ()}]
        ) from None


def validate_state(
    definition: StoreDefinition, value: Any, limits: DurableLimits, step_key: str
) -> tuple[Any, str]:
    """Run the schema, then check durability. Returns (state, canonical encoding)."""
    state = run_schema(definition, value, limits, step_key)
    encoded = encode_durable(
        detach(state), limits=limits, step_key=step_key, label=state_label(definition)
    )
    return state, encoded


def decode_stored(definition: StoreDefinition, id: str, encoded: str) -> Any:
    """The stored state ``encoded`` of store ``id``, decoded; ``CorruptStateError`` when
    it does not decode (a row written by hand or by another program)."""
    try:
        return decode_durable(encoded)
    except (ValueError, RecursionError) as exc:
        reason = f"{type(exc).__name__}: {str(exc)[:200]}"
        raise CorruptStateError(definition.name, id, reason) from None


def prepare_update(
    definition: StoreDefinition,
    encoded: str,
    updater: Callable[[Any], Any],
    limits: DurableLimits,
    step_key: str,
    *,
    id: str,
) -> tuple[str, list[StorePath]]:
    """Run ``updater`` on a draft of the state ``encoded`` (stored: of store ``id``):
    (new encoding, changed paths). A new state (a replacement, or a value the updater
    returned) is diffed against ``encoded``, which is let go before the new state is
    encoded: a caller that passes the only reference frees the old text then."""
    log = WriteLog()
    if isinstance(updater, Replacement):  # no draft: the old state is never decoded whole
        returned = call_sync(updater.make, "updater")
    else:
        draft = build_draft(decode_stored(definition, id, encoded), log)
        returned = call_sync(updater, "updater", draft)
        if returned is None or returned is draft:
            return finalize(definition, encoded, draft, draft, log, limits, step_key, id=id)
        # A returned state is diffed against the stored text: the draft goes first, so
        # the old state is not held decoded beside the new one.
        del draft
    state = run_schema(definition, returned, limits, step_key)
    plain, paths = diffed(definition, encoded, state, limits, step_key, id=id)
    del encoded  # diffed: only the row's id and version matter from here on
    planned = encode_checked(plain, limits=limits, step_key=step_key, label=state_label(definition))
    del returned, state, plain
    if isinstance(updater, Replacement) and updater.done is not None:
        updater.done(planned)  # the value may go: the commit needs only its text
    return planned, paths


def finalize(
    definition: StoreDefinition,
    encoded: str,
    candidate: Any,
    draft: Any,
    log: WriteLog,
    limits: DurableLimits,
    step_key: str,
    *,
    id: str,
) -> tuple[str, list[StorePath]]:
    """Validate ``candidate`` (the draft of the state ``encoded``, or a replacement) and
    encode it: (new encoding, paths changed from ``encoded``). ``CorruptStateError`` when
    ``encoded`` (of store ``id``) does not decode."""
    state = run_schema(definition, candidate, limits, step_key)
    label = state_label(definition)
    if state is draft and candidate is draft and isinstance(draft, (dict, list)):
        # The draft was decoded from storage: only the values placed in it need checking.
        placed = encode_placed(
            detach(draft), log.placements, limits=limits, step_key=step_key, label=label
        )
        return placed, log.paths()
    plain, paths = diffed(definition, encoded, state, limits, step_key, id=id)
    return encode_checked(plain, limits=limits, step_key=step_key, label=label), paths


def diffed(
    definition: StoreDefinition,
    encoded: str,
    state: Any,
    limits: DurableLimits,
    step_key: str,
    *,
    id: str,
) -> tuple[Any, list[StorePath]]:
    """The validated ``state`` checked for durability, as plain values, and the paths it
    changes from the stored text ``encoded`` (of store ``id``): ``CorruptStateError``
    when that does not decode."""
    plain = detach(state)
    check_durable(plain, limits=limits, step_key=step_key, label=state_label(definition))
    # The old state is read from its text as the diff goes (never decoded whole), before
    # the new text exists.
    try:
        paths = diff_stored(encoded, state)
    except (ValueError, RecursionError) as exc:
        reason = f"{type(exc).__name__}: {str(exc)[:200]}"
        raise CorruptStateError(definition.name, id, reason) from None
    return plain, paths


@dataclass
class Attempt:
    """One try of a write: the row it computes from (``created``: not stored yet, the
    commit inserts it), the step it records and the limits its values must keep.

    An update takes the row's text (``take_text``) once: the attempt keeps only the
    row's id and version after (the commit compares those), unless ``created`` (the
    commit inserts the row whole), so the old text can be freed once the new state is
    diffed against it, before that state is encoded."""

    definition: StoreDefinition
    id: str
    stored: StoredState
    created: bool
    step_id: StoreStepId | None
    limits: DurableLimits

    @property
    def step_key(self) -> str:
        return self.step_id.step_key if self.step_id else ""

    def take_text(self) -> str:
        """The row's text; from now on ``stored`` carries none unless ``created``."""
        stored = self.stored
        if not self.created:
            self.stored = StoredState(stored.instance_id, stored.version, "")
        return stored.encoded

    def mutation(
        self, encoded: str, paths: list[StorePath], record: str | None, operation: LedgerOperation
    ) -> StoreMutation:
        s = self
        return StoreMutation(
            s.definition, s.id, s.stored, s.created, encoded, paths, s.step_id, record, operation
        )


def plan_update(attempt: Attempt, updater: Updater, kind: str) -> StoreMutation:
    """The commit of ``updater`` computed from the attempt's row (recorded as ``kind``).
    The attempt's text is handed to the update whole (no reference kept here), so it
    goes once diffed."""
    a, version = attempt, attempt.stored.version
    encoded, paths = prepare_update(
        a.definition, a.take_text(), updater, a.limits, a.step_key, id=a.id
    )
    record = None
    if a.step_id:
        record = update_record(kind, encoded, version, version + 1)
    return a.mutation(encoded, paths, record, "update")


def plan_take(
    attempt: Attempt, selector: Selector, claim: Claim | None
) -> StoreTakeUnmatched | tuple[StoreMutation, str]:
    """Run the selector (and the claim) on the attempt's row: no match, or the commit of the
    claim with the encoded selection (checked before the commit, so a selection that cannot
    be recorded changes nothing)."""
    require_sync(selector, "selector")
    if claim is not None:
        require_sync(claim, "claim")
    a, stored, limits = attempt, attempt.stored, attempt.limits
    log = WriteLog()
    draft = build_draft(decode_stored(a.definition, a.id, stored.encoded), log)
    found, read_paths = track_selector(draft, lambda view: call_sync(selector, "selector", view))
    if not is_selector_match(found):
        return StoreTakeUnmatched(stored.instance_id, stored.version, tuple(read_paths))
    selected = unwrap_selected(found, max_depth=limits.max_depth)
    if claim is not None:
        call_sync(claim, "claim", draft, selected)
    encoded, paths = finalize(
        a.definition, stored.encoded, draft, draft, log, limits, a.step_key, id=a.id
    )
    selected_encoded = encode_durable(
        detach(selected),
        limits=limits,
        step_key=a.step_key,
        label=f'Store take selection for "{a.definition.name}"',
    )
    record = None
    if a.step_id:
        record = take_record(stored.instance_id, selected_encoded, stored.version + 1)
    return a.mutation(encoded, paths, record, "take"), selected_encoded
