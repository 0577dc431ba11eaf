"""The step primitives a workflow uses as ``result = yield from step.X(...)``.

Each primitive returns a ``StepGenerator`` (a ``OneStep``), a tiny generator used once:
it yields one ``StepCall`` to the engine and returns what the engine sends back (the
recorded result), or raises what it throws (the recorded error), at the very point the
workflow called it. Every primitive takes an optional ``key=``; without one, the step's
index in the run (``"0"``, ``"1"``, ...) is its key.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Concatenate, Final, NoReturn, ParamSpec, TypeVar

from ..conf import MAX_SECONDS, is_finite
from ..core.constants import MAX_KEY_LENGTH
from ..core.definition import StoreDefinition, get_definition
from ..core.keys import check_text
from ..core.results import StoreSnapshot, StoreUpdateResult
from ..core.store import Claim, Selector, Updater
from .registry import Workflow

__all__ = ["ChildStarts", "ClaimLease", "Step", "StepCall", "StepGenerator", "step_target"]

R = TypeVar("R")
P = ParamSpec("P")


#: What every primitive returns: ``yield from`` it, once, inside a workflow.
StepGenerator = Generator["StepCall", Any, R]


class OneStep(Generator["StepCall", Any, R]):
    """The ``StepGenerator`` a primitive returns: its generator, used once.

    A second ``yield from`` of the same one raises ``RuntimeError`` (a plain generator
    would return ``None`` at once, running nothing). Testing it for truth raises
    ``TypeError``: ``if step.patched("x"):`` without ``yield from`` would always be true.
    Until it starts it is in ``unused``, its ``Step``'s set of steps made and not used.
    """

    __slots__ = ("_gen", "_name", "_started", "_unused")

    def __init__(
        self, gen: Generator[StepCall, Any, R], name: str, unused: set[OneStep[Any]]
    ) -> None:
        self._gen = gen
        self._name = name  # "step.run", say
        self._started = False
        self._unused = unused
        unused.add(self)

    @property
    def name(self) -> str:
        """The primitive that made it: ``"step.run"``, say."""
        return self._name

    def _start(self) -> None:
        self._started = True
        self._unused.discard(self)

    def __iter__(self) -> OneStep[R]:
        if self._started:
            raise RuntimeError(
                f"this {self._name}() step was already used: a step runs once, at its "
                f"own `yield from`; call {self._name}(...) again for another step"
            )
        self._start()
        return self

    def send(self, value: Any) -> StepCall:
        if not self._started:
            self._start()
        return self._gen.send(value)

    def throw(self, *args: Any) -> StepCall:
        return self._gen.throw(*args)

    def close(self) -> None:
        self._gen.close()

    def __bool__(self) -> NoReturn:
        raise TypeError(
            f"a {self._name}() step is not its result: use `(yield from {self._name}(...))`"
        )

    def __repr__(self) -> str:
        return f"<{self._name}() step>"


def _primitive(
    method: Callable[Concatenate[Step, P], Generator[StepCall, Any, R]],
) -> Callable[Concatenate[Step, P], StepGenerator[R]]:
    """Make a generator method of ``Step`` return a ``OneStep``."""
    name = f"step.{method.__name__}"

    @functools.wraps(method)
    def primitive(self: Step, /, *args: P.args, **kwargs: P.kwargs) -> StepGenerator[R]:
        return OneStep(method(self, *args, **kwargs), name, self._unused)

    return primitive


#: The size of the heap's ``fingerprint`` column.
MAX_FINGERPRINT_LENGTH: Final = 512
#: What ends a fingerprint that carries a digest of the step's full description.
DIGEST_MARK: Final = " ~sha256:"


@dataclass(frozen=True)
class ClaimLease:
    """What a leased ``step.take`` returns: the claimed ``value`` and the lease to pass to
    ``step.release`` or ``step.complete``. ``seconds`` is the length of the lease the take
    recorded (to the microsecond), on its first run and on every replay, whatever
    ``lease=`` the code replaying it passes."""

    lease_id: str
    store_name: str
    store_id: str
    value: Any
    seconds: float


@dataclass(frozen=True)
class ChildStarts:
    """What a ``step.start``/``step.start_many`` asks for: the workflow's name, and per
    child its arguments and the id given (``None``: derived from the parent's id and the
    step key). ``single``: ``step.start`` (returns one id, not a list)."""

    workflow: str
    children: tuple[tuple[tuple[Any, ...], dict[str, Any], str | None], ...]
    single: bool
    #: The queue the children start through (``define_queue``; ``None``: started at
    #: once), with the key and priority of each start.
    queue: str | None = None
    queue_key: str | None = None
    priority: int = 0


def _workflow_name(workflow: Any, what: str) -> str:
    if isinstance(workflow, Workflow):
        return workflow.name
    if isinstance(workflow, str) and workflow:
        check_text("workflow name", workflow, empty=False)
        return workflow
    raise TypeError(f"{what} needs a workflow (a @workflow function or its name), not {workflow!r}")


def _queue_name(queue: Any) -> str | None:
    """The name of ``queue`` (a ``Queue`` or its name; ``None``: no queue)."""
    if queue is None:
        return None
    name = queue if isinstance(queue, str) else getattr(queue, "name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"start(queue=...) needs a queue (define_queue) or its name, not {queue!r}")
    return name


def _execution_ids(ids: Any, what: str) -> tuple[str, ...]:
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
        raise TypeError(f"{what} needs a list of execution ids, not {ids!r}")
    for id in ids:
        check_text("execution id", id, empty=False)
    return tuple(ids)


@dataclass(frozen=True, eq=False)
class StepCall:
    """One step request from a workflow to the engine. Not for use outside the runtime."""

    kind: str
    key: str | None
    fingerprint: str
    fn: Callable[..., Any] | None = None
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    definition: StoreDefinition | None = None
    store_id: str = ""
    selector: Selector | None = None
    claim: Claim | None = None
    updater: Updater | None = None
    choices: tuple[tuple[StoreDefinition, str, Selector, Claim | None], ...] = ()
    timeout: float | None = None
    #: What a kind needs besides the above (a child start's workflow and arguments, the
    #: ids a wait waits for).
    payload: Any = None

    def matches(self, fingerprint: str) -> bool:
        """Whether a heap row recorded with ``fingerprint`` is this step's."""
        return fingerprint == self.fingerprint


def _function_call(
    kind: str, fn: Callable[..., Any], key: str | None, args: tuple[Any, ...], kwargs: Any
) -> StepCall:
    """The call of a step kind that runs ``fn(*args, **kwargs)``, fingerprinted by its name."""
    return StepCall(
        kind,
        _check_key(key),
        fingerprint(callable_name(fn)),
        fn=fn,
        args=args,
        kwargs=dict(kwargs),
    )


def fingerprint(text: str, identity: str | None = None) -> str:
    """The fingerprint of a step described by ``text``.

    A text that fits the column is its own fingerprint. A longer one (or one given an
    ``identity``, an unambiguous description, when ``text`` could describe another step
    too) keeps its head for people to read and ends with a SHA-256 digest of the whole
    description, so a change anywhere in it is detected on replay.
    """
    if identity is None and len(text) <= MAX_FINGERPRINT_LENGTH:
        return text
    digest = hashlib.sha256((text if identity is None else identity).encode()).hexdigest()
    suffix = f"{DIGEST_MARK}{digest}"
    return text[: MAX_FINGERPRINT_LENGTH - len(suffix)] + suffix


def callable_name(fn: Callable[..., Any]) -> str:
    """``module.qualname`` of a callable (looking through ``functools.partial``)."""
    target: Any = fn
    while isinstance(target, functools.partial):
        target = target.func
    qualname = getattr(target, "__qualname__", None) or type(target).__qualname__
    module = getattr(target, "__module__", None) or type(target).__module__
    return f"{module}.{qualname}"


def derived_key(step_key: str, suffix: str) -> str:
    """``step_key`` + ``suffix``: a key a step uses in the ledger (and for waiters) besides
    its own, such as a ``take_any`` choice's. One longer than a key may be (the step key
    itself may have all 255 characters) keeps the step key's head and a digest of it."""
    key = step_key + suffix
    if len(key) <= MAX_KEY_LENGTH:
        return key
    digest = hashlib.sha256(step_key.encode()).hexdigest()[:32]
    return f"{step_key[: MAX_KEY_LENGTH - len(suffix) - len(digest) - 1]}~{digest}{suffix}"


def foreign_lease(action: str, lease_id: str) -> str:
    """The message of ``release``/``complete`` given a lease this execution did not take."""
    return (
        f"{action}() needs a lease this execution took; {lease_id!r} was taken by another "
        "execution (or by none)"
    )


def _check_key(key: str | None) -> str | None:
    if key is None:
        return None
    check_text("step key", key, empty=False)  # what the heap and the ledger cannot hold
    return key


def _check_store(definition: StoreDefinition, id: str) -> str:
    if not isinstance(definition, StoreDefinition):
        raise TypeError(f"expected a StoreDefinition (from define_store), not {definition!r}")
    # What the tables cannot hold is refused here, before the step is made (a take_any
    # would otherwise claim from an earlier choice before reaching a bad one).
    check_text("store id", id)
    return f"{definition.name}/{id}"


def _store_fingerprint(definition: StoreDefinition, id: str) -> str:
    """The fingerprint of a step on one store: its "<name>/<id>" text, or,
    when the name holds "/" (so another name and id read alike), that text with a digest of
    the exact pair."""
    text = _check_store(definition, id)
    return fingerprint(text, json.dumps([definition.name, id]) if "/" in definition.name else None)


def _seconds(value: float | timedelta, what: str) -> float:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} is a number of seconds, not {value!r}")
    if not is_finite(value) or value < 0:
        raise ValueError(
            f"{what} must be a finite, non-negative number of seconds: {_number(value)}"
        )
    if value > MAX_SECONDS:
        # A longer one would overflow the timer's due time (past datetime.max).
        raise ValueError(f"{what} is at most {MAX_SECONDS} seconds (100 years): {_number(value)}")
    return float(value)


def _number(value: float) -> str:
    """``value`` for a message: an int of thousands of digits has no ``str()``."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    return str(value)


class Step:
    """The step primitives of one execution, handed to the workflow function.

    ``execution_id`` and ``workflow_id`` identify the execution (an
    ``execution_id``-derived idempotency key is a good way to make an external call in
    ``run`` safe to repeat).
    """

    __slots__ = ("_unused", "execution_id", "workflow_id")

    def __init__(self, execution_id: str, workflow_id: str) -> None:
        self.execution_id = execution_id
        self.workflow_id = workflow_id
        self._unused: set[OneStep[Any]] = set()

    def unused_steps(self) -> list[str]:
        """The primitives (``"step.update"``, say) of the steps made and never used with
        ``yield from``, in name order: a workflow that returns with one ran nothing there."""
        return sorted(one.name for one in self._unused)

    @_primitive
    def run(
        self, fn: Callable[..., R], /, *args: Any, key: str | None = None, **kwargs: Any
    ) -> Generator[StepCall, Any, R]:
        """Call ``fn(*args, **kwargs)`` once and record its result (a durable value).

        On replay the recorded result is returned without calling ``fn``. ``fn`` runs at
        least once: a worker that dies after calling it and before recording the result
        calls it again. ``RetryableError`` retries it on a durable timer; any other error
        is recorded and raised here, on this and every later replay.
        """
        result: R = yield _function_call("run", fn, key, args, kwargs)
        return result

    @_primitive
    def atomic(
        self, fn: Callable[..., R], /, *args: Any, key: str | None = None, **kwargs: Any
    ) -> Generator[StepCall, Any, R]:
        """Call ``fn(*args, **kwargs)`` inside the transaction that records the step, and
        return its result (a durable value): exactly once.

        ``fn`` runs in a ``transaction.atomic`` on ``DATABASE_ALIAS``; what it writes
        there through the ORM (and the store calls it makes with the store client, whose
        wakes go out at the commit) commits with the step's heap row, or not at all. The
        row is written only while the run holds the execution's lease, and once per step:
        a run that lost its lease, or lost the race to another run of the step, commits
        none of ``fn``'s writes. On replay the recorded result is returned without calling
        ``fn``. An error rolls its writes back and is the step's error, as in ``run``
        (``RetryableError`` retries it on a durable timer); a database error that ends the
        transaction itself (``OperationalError``: the connection lost, a deadlock) records
        nothing, and the run ends to run the step again later. A write through another
        database alias inside ``fn`` is refused (``CrossDatabaseWriteError``).
        """
        if not callable(fn):
            raise TypeError(f"atomic() needs a callable, not {fn!r}")
        result: R = yield _function_call("atomic", fn, key, args, kwargs)
        return result

    @_primitive
    def sleep(
        self, seconds: float | timedelta, *, key: str | None = None
    ) -> Generator[StepCall, Any, None]:
        """Suspend for ``seconds`` on a durable timer; returns ``None`` once they passed.

        The wake-up time is recorded when the sleep first runs, so replays never extend it.
        """
        yield StepCall("sleep", _check_key(key), "", seconds=_seconds(seconds, "sleep()'s time"))
        return None

    @_primitive
    def take(
        self,
        definition: StoreDefinition,
        id: str,
        selector: Selector,
        claim: Claim | None = None,
        *,
        lease: float | timedelta | None = None,
        key: str | None = None,
    ) -> Generator[StepCall, Any, Any]:
        """Select and claim from a store, suspending until the selector matches.

        Returns the claimed ``selected`` value. While nothing matches, the execution waits
        (status ``waiting``) with a waiter on the paths the selector read; a change to them
        resumes it. The claim commits exactly once (through the applied-steps ledger).

        With ``lease=seconds`` it returns a ``ClaimLease`` (``.value`` is the selected
        value) and records a lease in the claim's transaction: end it with
        ``step.complete(lease)``, or hand the value back with ``step.release(lease)``;
        if it expires first, the definition's ``release(draft, value)`` hands it back.
        """
        printed = _store_fingerprint(definition, id)
        if not callable(selector):
            raise TypeError("take() needs a selector callable")
        if claim is not None and not callable(claim):
            raise TypeError("take()'s claim must be callable or None")
        seconds = 0.0
        if lease is not None:
            seconds = _seconds(lease, "take()'s lease")
            if seconds <= 0:
                raise ValueError(f"take()'s lease must be positive: {seconds}")
            if definition.release is None:
                raise TypeError(
                    f"a leased take needs define_store({definition.name!r}, ..., "
                    "release=fn(draft, value)) to hand the value back"
                )
        selected = yield StepCall(
            "take" if lease is None else "take_lease",
            _check_key(key),
            printed,
            definition=definition,
            store_id=id,
            selector=selector,
            claim=claim,
            seconds=seconds,
        )
        return selected

    def release(self, lease: ClaimLease, *, key: str | None = None) -> StepGenerator[bool]:
        """Hand a leased value back through the store's ``release`` callback and end the
        lease. Returns ``False`` (and changes nothing) if the lease had already ended."""
        return OneStep(self._end_lease("release", lease, key), "step.release", self._unused)

    def complete(self, lease: ClaimLease, *, key: str | None = None) -> StepGenerator[bool]:
        """End a lease, keeping the claim. Returns ``False`` if it had already ended (it
        expired and its value was handed back): the work done under it must not count."""
        return OneStep(self._end_lease("complete", lease, key), "step.complete", self._unused)

    def _end_lease(
        self, action: str, lease: ClaimLease, key: str | None
    ) -> Generator[StepCall, Any, bool]:
        if not isinstance(lease, ClaimLease):
            raise TypeError(
                f"{action}() needs the ClaimLease a leased take returned, not {lease!r}"
            )
        if not lease.lease_id.startswith(f"{self.execution_id}/"):
            raise ValueError(foreign_lease(action, lease.lease_id))
        printed = fingerprint(f"{action}:{lease.lease_id}")
        ended: bool = yield StepCall(
            "end_lease",
            _check_key(key),
            printed,
            args=(action, lease),
        )
        return ended

    @_primitive
    def take_any(
        self,
        choices: Sequence[tuple[StoreDefinition, str, Selector, Claim | None]],
        timeout: float | timedelta | None = None,
        *,
        key: str | None = None,
    ) -> Generator[StepCall, Any, tuple[int | None, Any]]:
        """Wait until one of ``choices`` (``(store, id, selector, claim)`` tuples) matches.

        Returns ``(index, selected)`` for the one choice claimed (the first that matches,
        in list order), or ``(None, None)`` when ``timeout`` seconds run out first. Exactly
        one claim ever commits, with the heap record and the removal of the other
        choices' waiters, in one transaction. Replays return the recorded pair.
        """
        if isinstance(choices, (str, bytes)) or not isinstance(choices, Sequence) or not choices:
            raise TypeError("take_any() needs a non-empty list of (store, id, selector, claim)")
        checked: list[tuple[StoreDefinition, str, Selector, Claim | None]] = []
        fingerprints: list[str] = []
        stores: list[list[str]] = []
        for choice in choices:
            if not isinstance(choice, tuple) or len(choice) not in (3, 4):
                raise TypeError(f"a take_any() choice is (store, id, selector, claim): {choice!r}")
            definition, id, selector = choice[0], choice[1], choice[2]
            claim = choice[3] if len(choice) == 4 else None
            fingerprints.append(_check_store(definition, id))
            stores.append([definition.name, id])
            if not callable(selector):
                raise TypeError("a take_any() choice needs a selector callable")
            if claim is not None and not callable(claim):
                raise TypeError("a take_any() choice's claim must be callable or None")
            checked.append((definition, id, selector, claim))
        if timeout is not None:
            timeout = _seconds(timeout, "take_any()'s timeout")
        text = " | ".join(fingerprints)
        # A name holding "/", or a name or id holding " | ", makes a text that other
        # choices could make too: then the digest is of the exact list.
        ambiguous = len(text) > MAX_FINGERPRINT_LENGTH or any(
            "/" in name or " | " in name or " | " in id for name, id in stores
        )
        printed = fingerprint(text, json.dumps(stores) if ambiguous else None)
        result: tuple[int | None, Any] = yield StepCall(
            "take_any",
            _check_key(key),
            printed,
            choices=tuple(checked),
            timeout=timeout,
        )
        return result

    @_primitive
    def update(
        self, definition: StoreDefinition, id: str, updater: Updater, *, key: str | None = None
    ) -> Generator[StepCall, Any, StoreUpdateResult]:
        """Apply ``updater`` to a store exactly once (through the applied-steps ledger)."""
        printed = _store_fingerprint(definition, id)
        if not callable(updater):
            raise TypeError("update() needs an updater callable")
        result: StoreUpdateResult = yield StepCall(
            "update",
            _check_key(key),
            printed,
            definition=definition,
            store_id=id,
            updater=updater,
        )
        return result

    @_primitive
    def get(
        self, definition: StoreDefinition, id: str, *, key: str | None = None
    ) -> Generator[StepCall, Any, StoreSnapshot]:
        """Read a store; the snapshot is recorded, so every replay sees the same one."""
        printed = _store_fingerprint(definition, id)
        snapshot: StoreSnapshot = yield StepCall(
            "get",
            _check_key(key),
            printed,
            definition=definition,
            store_id=id,
        )
        return snapshot

    @_primitive
    def delete(
        self, definition: StoreDefinition, id: str, *, key: str | None = None
    ) -> Generator[StepCall, Any, bool]:
        """Delete a store exactly once (through the applied-steps ledger): its state goes
        and its waiters are woken; the ledger's records of steps on it stay.
        Returns ``True`` if this step deleted the store, ``False`` if it did not exist
        (nothing is created). A later step on the store creates it again from
        ``initial``, as a new instance."""
        printed = _store_fingerprint(definition, id)
        deleted: bool = yield StepCall(
            "delete",
            _check_key(key),
            printed,
            definition=definition,
            store_id=id,
        )
        return deleted

    @_primitive
    def start(
        self,
        workflow: Workflow[Any, Any] | str,
        /,
        *args: Any,
        execution_id: str | None = None,
        key: str | None = None,
        queue: Any = None,
        queue_key: str | None = None,
        priority: int = 0,
        **kwargs: Any,
    ) -> Generator[StepCall, Any, str]:
        """Start a child execution of ``workflow`` with ``args`` and ``kwargs``, exactly
        once; return its id.

        The child's row (its ``parent`` is this execution) and this step's record commit
        in one transaction, written only while this run holds the lease, so however often
        the step runs (a worker killed, two workers racing) one child exists. Its id is
        ``execution_id`` if given, else derived from this execution's id and the step key
        (``"<parent>:<key>"``). A child's deadline is never later than its parent's; a
        cancel of this execution cancels it too. Wait for it with ``step.wait``.

        With ``queue`` (a ``define_queue`` queue or its name) the child starts through
        that queue, as ``queue.start`` would (``queue_key``: its ``key``; ``priority``),
        in the same transaction: it is ``queued`` until the queue admits it.
        """
        name = _workflow_name(workflow, "start()")
        if execution_id is not None:
            check_text("execution id", execution_id, empty=False)
        queue_name = _queue_name(queue)
        child_id: str = yield StepCall(
            "start",
            _check_key(key),
            name if queue_name is None else f"{name} @{queue_name}",
            payload=ChildStarts(
                name,
                ((args, dict(kwargs), execution_id),),
                single=True,
                queue=queue_name,
                queue_key=queue_key,
                priority=priority,
            ),
        )
        return child_id

    @_primitive
    def start_many(
        self,
        workflow: Workflow[Any, Any] | str,
        arguments: Sequence[Any],
        /,
        *,
        key: str | None = None,
    ) -> Generator[StepCall, Any, list[str]]:
        """Start one child execution of ``workflow`` per item of ``arguments``, in one step
        and one transaction (the rows inserted in bulk); return their ids in order.

        An item is a list or tuple of positional arguments, or a dict of keyword
        arguments. The ids are ``"<parent>:<key>:<index>"``. Exactly once, as ``start``.
        """
        name = _workflow_name(workflow, "start_many()")
        if isinstance(arguments, (str, bytes)) or not isinstance(arguments, Sequence):
            raise TypeError(f"start_many() needs a list of arguments, not {arguments!r}")
        children: list[tuple[tuple[Any, ...], dict[str, Any], str | None]] = []
        for item in arguments:
            if isinstance(item, dict):
                children.append(((), dict(item), None))
            elif isinstance(item, (list, tuple)):
                children.append((tuple(item), {}, None))
            else:
                raise TypeError(
                    "a start_many() item is a list of arguments or a dict of keyword "
                    f"arguments, not {item!r}"
                )
        ids: list[str] = yield StepCall(
            "start",
            _check_key(key),
            f"{name} *",
            payload=ChildStarts(name, tuple(children), single=False),
        )
        return ids

    @_primitive
    def wait(
        self, execution_id: str, /, *, key: str | None = None
    ) -> Generator[StepCall, Any, Any]:
        """Suspend until the execution ``execution_id`` finishes; return its result.

        Any execution may be waited for, not only a child of this one. Its end wakes this
        one (no polling). Raises ``ChildFailedError`` (its error's type and message) if it
        failed, ``ChildCancelledError`` if it was cancelled, ``LookupError`` if there is
        no such execution. The outcome is recorded: every replay returns (or raises) it.
        """
        ids = _execution_ids([execution_id], "wait()")
        results: list[Any] = yield StepCall("wait", _check_key(key), ids[0], payload=ids)
        return results[0]

    @_primitive
    def gather(
        self, execution_ids: Sequence[str], /, *, key: str | None = None
    ) -> Generator[StepCall, Any, list[Any]]:
        """``wait`` for every execution of ``execution_ids``; return their results in that
        order. The first one (in that order) that failed or was cancelled raises, once
        all have finished. However many they are, this execution is woken once, when the
        last one finishes."""
        ids = _execution_ids(execution_ids, "gather()")
        text = json.dumps(list(ids))
        results: list[Any] = yield StepCall(
            "wait", _check_key(key), fingerprint(f"gather {len(ids)}", text), payload=ids
        )
        return results

    @_primitive
    def patched(self, change_id: str) -> Generator[StepCall, Any, bool]:
        """Whether this execution takes the new branch of the change ``change_id``.

        ``True`` for an execution that reaches this call under the new code (no recorded
        step ahead of it), ``False`` for one whose heap recorded later steps before the
        patch existed. The answer is recorded, so every replay takes the same branch. It
        takes no step index: adding it does not shift the keys of the steps after it.
        """
        check_text("change id", change_id, empty=False)
        key = _check_key("patch:" + change_id)
        decision: bool = yield StepCall("patch", key, change_id)
        return decision

    def __repr__(self) -> str:
        return f"<Step of {self.workflow_id} {self.execution_id}>"


#: The step kinds whose fingerprint names one function (``module.qualname``).
FUNCTION_KINDS: Final = frozenset({"run", "atomic"})
#: The step kinds whose fingerprint names one store (``<name>/<id>``).
STORE_KINDS: Final = frozenset({"take", "take_lease", "update", "get", "delete"})


def step_target(kind: str, printed: str) -> dict[str, Any] | None:
    """What a recorded step of ``kind`` ran on, read back from its fingerprint:
    ``{"function": "module.qualname"}`` for ``run`` and ``atomic``, ``{"store": name,
    "id": id}`` for a step on one store (a leased take too), ``{"stores": [{"store",
    "id"}, ...]}`` for a ``take_any``, ``None`` for the kinds that name neither
    (``sleep``, ``patch``, a lease's release or completion). A fingerprint cut short by
    its digest (a description longer than the column, or a store name holding "/") is
    ``{"description": <its readable head>}`` when it cannot be read back exactly."""
    if kind in FUNCTION_KINDS:
        if DIGEST_MARK in printed:
            return {"description": printed.split(DIGEST_MARK, 1)[0]}
        return {"function": printed}
    if kind in STORE_KINDS:
        store = _store_from_text(printed)
        return store if store is not None else {"description": _head(printed)}
    if kind == "take_any":
        if DIGEST_MARK in printed:
            return {"description": _head(printed)}
        stores = [_store_from_text(text) for text in printed.split(" | ")]
        if any(store is None for store in stores):
            return {"description": printed}
        return {"stores": stores}
    return None


def _head(printed: str) -> str:
    return printed.split(DIGEST_MARK, 1)[0]


def _store_from_text(text: str) -> dict[str, str] | None:
    """``{"store", "id"}`` of a ``<name>/<id>`` text: the name is everything before the
    first "/" (a name holding "/" makes a fingerprint with a digest, read as the name
    registered that the text begins with); ``None`` if it cannot be told."""
    if DIGEST_MARK in text:
        head = text.split(DIGEST_MARK, 1)[0]
        names = [
            name
            for name, _, rest in _prefixes(head)
            if get_definition(name) is not None and rest == head[len(name) + 1 :]
        ]
        if len(names) != 1 or len(head) >= MAX_FINGERPRINT_LENGTH - 80:
            return None
        return {"store": names[0], "id": head[len(names[0]) + 1 :]}
    name, slash, id = text.partition("/")
    if not slash:
        return None
    return {"store": name, "id": id}


def _prefixes(text: str) -> list[tuple[str, str, str]]:
    """Each split of ``text`` at one of its "/": ``(before, "/", after)``."""
    return [(text[:i], "/", text[i + 1 :]) for i, char in enumerate(text) if char == "/"]
