"""A stateful model test: random interleavings of every store operation on a database client
agree with ``MemoryStoreClient``.

Each Hypothesis example drives the client under test (PostgreSQL through the PL/pgSQL
function and through the portable statements, and SQLite) and a fresh memory client with
the same operations: get, update, update_from with fresh and stale snapshots, matched and
unmatched takes, delete, delete_from, step-id replays (also after a deletion and
re-creation), waiter registrations (current and stale) and removals. After every step the
results, raised error types, stored states, versions, waiters and the executions woken must
be equal. Instance ids are random, so both sides name them by order of first appearance.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from yieldstar_django.core.cas import CasStoreClient
from yieldstar_django.core.definition import define_store, unregister_store
from yieldstar_django.core.durable import decode_durable
from yieldstar_django.core.results import StoreStepId, StoreTakeUnmatched, StoreWaiter

from .harness import MemoryHarness

IDS = ["a", "b"]
EXECUTIONS = ["e0", "e1", "e2"]
_names = itertools.count()
#: A step id for 1 operation in 3: 0-2 name the same few steps again (replays), 3-8 none.
REPLAY = st.integers(0, 8)


# --- the operations, pure functions of the state they are given ----------------------------


def _inc(s: Any) -> Any:
    if not isinstance(s, dict):
        return {"jobs": [], "n": 1}
    s["n"] = s.get("n", 0) + 1
    return None


def _push(s: Any) -> Any:
    if not isinstance(s, dict):
        return {"jobs": [0], "n": 0}
    s["jobs"].append(len(s["jobs"]))
    return None


def _root_list(s: Any) -> Any:
    return ["root", len(s)]


def _reset(s: Any) -> Any:
    return {"jobs": [], "n": 0}


def _noop(s: Any) -> Any:
    return None


def _fail(s: Any) -> Any:
    raise ValueError("updater failed")


UPDATERS = {
    "inc": _inc,
    "push": _push,
    "root": _root_list,
    "reset": _reset,
    "noop": _noop,
    "fail": _fail,
}


# A selector sees a read-only view of the state, a ``dict`` for ``isinstance`` (the model's
# states are a dict or a list).


def _first_job(s: Any) -> Any:
    return (
        s["jobs"][0] if isinstance(s, dict) and isinstance(s["jobs"], list) and s["jobs"] else None
    )


def _n_at_least_2(s: Any) -> Any:
    return isinstance(s, dict) and s["n"] >= 2 and s["n"]


def _nothing(s: Any) -> Any:
    return None


SELECTORS = {"first_job": _first_job, "n>=2": _n_at_least_2, "nothing": _nothing}


def _claim(draft: Any, selected: Any) -> None:
    if isinstance(draft, dict) and draft["jobs"] and draft["jobs"][0] == selected:
        draft["jobs"].pop(0)
    else:
        draft["n"] = 0


# --- comparing the two sides --------------------------------------------------------------


class Side:
    """One client, the wakes it delivered so far and its instance ids in order seen."""

    def __init__(self, client: CasStoreClient, wakes: list[Any]) -> None:
        self.client = client
        self.wakes = wakes
        self.seen = 0
        self.instances: dict[str, str] = {}
        self.snapshots: list[Any] = []
        self.unmatched: list[Any] = []

    def label(self, instance_id: str) -> str:
        return self.instances.setdefault(instance_id, f"I{len(self.instances)}")

    def norm(self, value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return (type(value).__name__, self.norm(dataclasses.asdict(value)))
        if isinstance(value, dict):
            return {
                k: self.label(v) if k.endswith("instance_id") else self.norm(v)
                for k, v in value.items()
            }
        if isinstance(value, (list, tuple)):
            return [self.norm(v) for v in value]
        return value

    def call(self, fn: Any) -> Any:
        self.last: Any = None
        try:
            self.last = fn(self.client)
            return ("ok", self.norm(self.last))
        except Exception as exc:  # the error's type is part of the contract
            return ("error", type(exc).__name__)

    def new_wakes(self) -> list[str]:
        woken = sorted({w.execution_id for w in self.wakes[self.seen :]})
        self.seen = len(self.wakes)
        return woken


def make_machine(subject: Side) -> type[RuleBasedStateMachine]:
    class StoreModel(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            memory = MemoryHarness()
            self.model = Side(memory.client, memory.wakes)
            self.subject = subject
            subject.instances.clear()
            subject.snapshots.clear()
            subject.unmatched.clear()
            subject.new_wakes()
            self.definition = define_store(
                f"model{next(_names)}", None, initial=lambda id: {"jobs": [], "n": 0}
            )
            self.step = 0

        def teardown(self) -> None:
            unregister_store(self.definition.name)

        def both(self, fn: Any) -> Any:
            expected = self.model.call(fn)
            actual = self.subject.call(fn)
            assert actual == expected
            assert self.subject.new_wakes() == self.model.new_wakes(), "woken executions"
            return expected

        def step_id(self, replay: int) -> StoreStepId | None:
            if replay > 2:
                return None
            return StoreStepId("e0", f"step-{replay}")

        @rule(id=st.sampled_from(IDS))
        def get(self, id: str) -> None:
            self.both(lambda c: c.get_store(self.definition, id))
            for side in (self.model, self.subject):
                side.snapshots.append((id, side.last))

        @rule(
            id=st.sampled_from(IDS),
            op=st.sampled_from(sorted(UPDATERS)),
            replay=REPLAY,
        )
        def update(self, id: str, op: str, replay: int) -> None:
            step = self.step_id(replay)
            self.both(
                lambda c: c.update_store(self.definition, id, updater=UPDATERS[op], step_id=step)
            )

        @rule(
            data=st.data(),
            op=st.sampled_from(sorted(UPDATERS)),
            replay=REPLAY,
        )
        def update_from(self, data: st.DataObject, op: str, replay: int) -> None:
            step = self.step_id(replay)
            self._from_a_snapshot(
                data,
                lambda c, id, snapshot: c.update_store_from(
                    self.definition, id, snapshot=snapshot, updater=UPDATERS[op], step_id=step
                ),
            )

        @rule(data=st.data(), replay=REPLAY)
        def delete_from(self, data: st.DataObject, replay: int) -> None:
            step = self.step_id(replay)
            self._from_a_snapshot(
                data,
                lambda c, id, snapshot: c.delete_store_from(
                    self.definition, id, snapshot=snapshot, step_id=step
                ),
            )

        @rule(id=st.sampled_from(IDS))
        def delete(self, id: str) -> None:
            self.both(lambda c: c.delete_store(self.definition, id))

        @rule(
            id=st.sampled_from(IDS),
            selector=st.sampled_from(sorted(SELECTORS)),
            replay=REPLAY,
            wait=st.none() | st.sampled_from(EXECUTIONS),
        )
        def take(self, id: str, selector: str, replay: int, wait: str | None) -> None:
            """A take; an unmatched one registers a waiter right away when ``wait`` names
            an execution (as the runtime does)."""
            step = self.step_id(replay)
            self.both(
                lambda c: c.take_from_store(
                    self.definition, id, selector=SELECTORS[selector], claim=_claim, step_id=step
                )
            )
            for side in (self.model, self.subject):
                # (a replayed step id may return another operation's recorded result)
                if isinstance(side.last, StoreTakeUnmatched):
                    side.unmatched.append((id, side.last))
            if wait is not None and isinstance(self.model.last, StoreTakeUnmatched):
                self.register(len(self.model.unmatched) - 1, wait)

        @rule(data=st.data(), execution=st.sampled_from(EXECUTIONS))
        def register_waiter(self, data: st.DataObject, execution: str) -> None:
            """Register from any earlier unmatched take: the latest one may be current,
            older ones are likely stale (and so woken at once)."""
            if not self.model.unmatched:
                return
            self.register(data.draw(st.integers(0, len(self.model.unmatched) - 1)), execution)

        def register(self, index: int, execution: str) -> None:
            def register(c: CasStoreClient) -> None:
                id, result = self._side(c).unmatched[index]
                c.register_waiter(
                    StoreWaiter(
                        "wf",
                        execution,
                        f"take-{index}",
                        self.definition.name,
                        id,
                        result.instance_id,
                        result.version,
                        result.read_paths,
                    )
                )

            self.both(register)

        @rule(execution=st.sampled_from(EXECUTIONS))
        def remove_waiters(self, execution: str) -> None:
            self.both(lambda c: c.remove_waiters(execution))

        def _side(self, c: CasStoreClient) -> Side:
            return self.model if c is self.model.client else self.subject

        def _from_a_snapshot(
            self, data: st.DataObject, write: Callable[[CasStoreClient, str, Any], Any]
        ) -> None:
            """``write(client, id, snapshot)`` on both sides with the snapshot read by the
            same earlier ``get`` (drawn from ``data``); nothing before the first ``get``."""
            if not self.model.snapshots:
                return
            index = data.draw(st.integers(0, len(self.model.snapshots) - 1))
            self.both(lambda c: write(c, self._id_of(c, index), self._snapshot(c, index)))

        def _snapshot(self, c: CasStoreClient, index: int) -> Any:
            return self._side(c).snapshots[index][1]

        def _id_of(self, c: CasStoreClient, index: int) -> str:
            return str(self._side(c).snapshots[index][0])

        @invariant()
        def same_stores(self) -> None:
            def observe(side: Side) -> Any:
                stores = {}
                for id in IDS:
                    stored = side.client.read_store(self.definition, id)
                    waiters = sorted(
                        (
                            w.execution_id,
                            w.step_key,
                            side.label(w.instance_id),
                            w.since_version,
                            sorted(map(str, w.read_paths)),
                        )
                        for w in side.client.waiters(self.definition, id)
                    )
                    stores[id] = (
                        stored
                        and (
                            side.label(stored.instance_id),
                            stored.version,
                            decode_durable(stored.encoded),
                        ),
                        waiters,
                    )
                return side.client.list_stores(self.definition), stores

            assert observe(self.subject) == observe(self.model)

    return StoreModel


@pytest.mark.slow
def test_database_client_agrees_with_memory(harness: Any) -> None:
    """Against every database harness: PostgreSQL's PL/pgSQL path (``postgres``), the
    statements path on PostgreSQL (``postgres-statements``) and on SQLite."""
    if harness.name == "memory":
        pytest.skip("the memory client is the model")
    machine = make_machine(Side(harness.client, harness.wakes))
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=50,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
