"""An independent checker of store histories, written for the fault suite.

A history is a list of :class:`Op`: one store operation as a client saw it, with its
invocation and completion times (seconds, one clock for every process of the machine),
its arguments and its result. An op with no completion is *indeterminate* (its process was
killed, its connection dropped, its transaction never reported a commit): it may or may
not have taken effect.

``check_register`` verifies that the history of one store is linearizable as a
compare-and-swap register whose writes are the model operations of :data:`MODEL`. Store
versions give the witness order: version ``v`` is the state after the ``v``-th committed
write. The checker replays the writes in version order from the initial state and
requires that

- each version is committed by exactly one logical write (two writes that both report
  version ``v`` are a lost update or a duplicate claim);
- each write's result is what its model operation gives on the state before it (a claimed
  item that the model does not hand out was invented, or claimed twice);
- a version no completed write reports is explained by some indeterminate write;
- each read (``get``, or a ``take`` that matched nothing) returns the state of its version;
- real-time order holds: an op that started after another completed sees its version or a
  later one (a write, a strictly later one). Violations are stale reads or lost updates.

Writes made with the same step id (an execution's store step, replayed from the ledger)
are one logical operation that spans from its first invocation to its first completion;
all of its completions must return the same result.

``check_queue`` verifies a drained queue: every pushed item was taken exactly once and
nothing was taken that was never pushed.

``check_entries`` verifies a table of a project's own rows written by atomic steps (one
row per step, no unique key): no step's row is duplicated, none is missing, each is the
one its step returned, and each execution's tally counts its rows.

``check_ticks`` verifies a schedule's ticks: each second of a window ran exactly one
execution (its id names the tick), whose one row was committed once.
"""

from __future__ import annotations

import copy
import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "MODEL",
    "Op",
    "check_entries",
    "check_queue",
    "check_register",
    "load_history",
]

#: A model write: ``(state, args) -> (new state, output)``; ``new state`` is ``None``
#: when the operation changes nothing (a take that found no item).
ModelOp = Callable[[Any, Mapping[str, Any]], tuple[Any, Any]]


def _push(state: Any, args: Mapping[str, Any]) -> tuple[Any, Any]:
    new = copy.deepcopy(state)
    new["items"].extend({"value": v, "claimed_by": None} for v in args["values"])
    return new, None


def _take(state: Any, args: Mapping[str, Any]) -> tuple[Any, Any]:
    """Claim the first unclaimed item for ``args["by"]``; output the claimed item."""
    new = copy.deepcopy(state)
    for item in new["items"]:
        if item["claimed_by"] is None:
            item["claimed_by"] = args["by"]
            return new, copy.deepcopy(item)
    return None, None


def _add(state: Any, args: Mapping[str, Any]) -> tuple[Any, Any]:
    new = copy.deepcopy(state)
    new["total"] += args["amount"]
    return new, None


#: The model operations, by the ``kind`` in an op's arguments.
MODEL: dict[str, ModelOp] = {"push": _push, "take": _take, "add": _add}

WRITES = frozenset({"update", "take"})


@dataclass
class Op:
    """One operation on one store as a client saw it.

    ``name`` is ``"update"``, ``"take"`` or ``"get"``; ``args`` holds the model operation
    (``{"kind": ...}``) of an update or take. ``result`` is ``None`` for an indeterminate
    op; else ``{"version", "state"}`` for get and update (update adds
    ``"previous_version"``), ``{"matched", "version", "selected"}`` for take.
    """

    process: str
    name: str
    invoke: float
    complete: float | None = None
    result: dict[str, Any] | None = None
    args: dict[str, Any] = field(default_factory=dict)
    step: str | None = None
    instance: str = ""

    @property
    def version(self) -> int:
        assert self.result is not None
        return int(self.result["version"])

    @property
    def is_write(self) -> bool:
        """Committed a new version (a take that matched nothing did not)."""
        if self.name == "update":
            return True
        return self.name == "take" and (self.result is None or bool(self.result["matched"]))

    def describe(self) -> str:
        where = f" step {self.step}" if self.step else ""
        return f"{self.name}{where} by {self.process} {json.dumps(self.args, sort_keys=True)}"


def load_history(directory: Path) -> dict[str, list[Op]]:
    """Read every ``*.jsonl`` file of ``directory`` into ops, by store.

    Each line is ``{"id", "type": "invoke"|"ok"|"fail", "time", ...}``; an invoke carries
    ``process, store, op, args, step``, an ``ok`` its ``result`` (and ``instance``). An
    invoke without ``ok`` (no line, or ``fail``) is indeterminate.
    """
    invokes: dict[str, dict[str, Any]] = {}
    oks: dict[str, dict[str, Any]] = {}
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a SIGKILL
            if event["type"] == "invoke":
                invokes[event["id"]] = event
            elif event["type"] == "ok":
                oks[event["id"]] = event
    stores: dict[str, list[Op]] = defaultdict(list)
    for key, event in invokes.items():
        done = oks.get(key)
        stores[event["store"]].append(
            Op(
                process=event["process"],
                name=event["op"],
                invoke=event["time"],
                complete=None if done is None else done["time"],
                result=None if done is None else done["result"],
                args=event.get("args") or {},
                step=event.get("step"),
                instance="" if done is None else done.get("instance", ""),
            )
        )
    return dict(stores)


def _merge_steps(ops: Iterable[Op], anomalies: list[str]) -> list[Op]:
    """One logical write per step id: first invocation, first completion, one result.

    A take that matched nothing is a read of its own (the step takes again later)."""
    merged: list[Op] = []
    by_step: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        if op.step and op.is_write:
            by_step[op.step].append(op)
        else:
            merged.append(op)
    for step, group in by_step.items():
        done = sorted((op for op in group if op.complete is not None), key=_completion)
        results = {json.dumps(op.result, sort_keys=True) for op in done}
        if len(results) > 1:
            anomalies.append(f"step {step} returned different results: {sorted(results)}")
        first = done[0] if done else group[0]
        merged.append(
            Op(
                process=first.process,
                name=first.name,
                invoke=min(op.invoke for op in group),
                complete=first.complete,
                result=first.result,
                args=first.args,
                step=step,
                instance=first.instance,
            )
        )
    return merged


def _completion(op: Op) -> float:
    assert op.complete is not None
    return op.complete


def check_register(ops: Sequence[Op], initial: Any) -> list[str]:
    """Anomalies that keep this one store's history from being a linearizable CAS
    register starting at ``initial`` (version 0); an empty list means none."""
    anomalies: list[str] = []
    logical = _merge_steps(ops, anomalies)
    done = [op for op in logical if op.result is not None]
    instances = {op.instance for op in done if op.instance}
    if len(instances) > 1:
        anomalies.append(f"the store changed instance: {sorted(instances)}")

    writes: dict[int, Op] = {}
    for op in (op for op in done if op.is_write):
        if op.version < 1:
            anomalies.append(f"{op.describe()} committed version {op.version}")
        elif op.version in writes:
            anomalies.append(
                f"version {op.version} committed twice (lost update or duplicate claim): "
                f"{writes[op.version].describe()} and {op.describe()}"
            )
        else:
            writes[op.version] = op
    unknown = [op for op in logical if op.result is None and op.is_write]
    top = max((op.version for op in done), default=0)
    states = _replay(writes, unknown, initial, top, anomalies)
    if states is not None:
        _check_reads(done, states, anomalies)
    _check_real_time(done, anomalies)
    return anomalies


def _apply(op: Op, state: Any) -> tuple[Any, Any]:
    kind = op.args.get("kind")
    if kind not in MODEL:
        raise ValueError(f"no model operation {kind!r} for {op.describe()}")
    return MODEL[kind](state, op.args)


def _replay(
    writes: dict[int, Op], unknown: list[Op], initial: Any, top: int, anomalies: list[str]
) -> dict[int, Any] | None:
    """The state of every version 0..top, replaying writes in version order.

    Versions no completed write reports are filled by indeterminate writes, searched (with
    backtracking) for an assignment under which every reported write up to the next
    reported update agrees with the model; an update's recorded state pins the register,
    so the search restarts from there."""
    states: dict[int, Any] = {0: initial}
    spare = list(unknown)
    version = 1
    while version <= top:
        op = writes.get(version)
        if op is not None:
            states[version] = _check_write(op, version, states[version - 1], anomalies)
            version += 1
            continue
        pin = min(
            (v for v, w in writes.items() if v > version and w.name == "update"), default=top + 1
        )
        budget = [SEARCH_BUDGET]
        path = _search(version, pin, states[version - 1], spare, writes, budget)
        if path is None:
            why = "the search gave up" if budget[0] <= 0 else "no assignment fits"
            anomalies.append(
                f"no operation of the history explains the versions from {version} to "
                f"{pin - 1} ({why}: an invented write, or a reported result no order gives)"
            )
            return None
        for at, state, used in path:
            states[at] = state
            if used is not None:
                spare.remove(used)
        version = pin
    return states


#: Most candidate placements one search of indeterminate writes tries.
SEARCH_BUDGET = 100_000


def _search(
    version: int,
    pin: int,
    before: Any,
    spare: list[Op],
    writes: dict[int, Op],
    budget: list[int],
) -> list[tuple[int, Any, Op | None]] | None:
    """States (and the indeterminate write used, if any) of versions ``version`` to
    ``pin - 1`` such that every reported write there, and the one at ``pin``, agrees."""
    path: list[tuple[int, Any, Op | None]] = []
    while version < pin and version in writes:  # reported writes: no choice to make
        op = writes[version]
        if _disagrees(op, before):
            return None
        before, _ = _apply(op, before)
        path.append((version, before, None))
        version += 1
    if version == pin:
        following = writes.get(pin)
        return path if following is None or not _disagrees(following, before) else None
    gaps = sum(1 for v in range(version, pin) if v not in writes)
    if gaps > len(spare):
        return None
    for index, candidate in enumerate(spare):
        budget[0] -= 1
        if budget[0] <= 0:
            return None
        after, _ = _apply(candidate, before)
        if after is None:
            continue
        rest = spare[:index] + spare[index + 1 :]
        tail = _search(version + 1, pin, after, rest, writes, budget)
        if tail is not None:
            return [*path, (version, after, candidate), *tail]
    return None


def _disagrees(op: Op, before: Any) -> str:
    """Why ``op``'s reported result is not what its model operation gives on ``before``
    ("" when it agrees)."""
    assert op.result is not None
    after, output = _apply(op, before)
    if after is None:
        return (
            f"claimed {op.result.get('selected')!r}, but no unclaimed item was there "
            "(an invented or twice-claimed item)"
        )
    if op.name == "take" and output != op.result["selected"]:
        return (
            f"claimed {op.result['selected']!r}; the register hands out {output!r} "
            "(a duplicate claim or a lost update)"
        )
    if op.name == "update" and after != op.result["state"]:
        return (
            f"returned {op.result['state']!r}; applied in version order it gives {after!r} "
            "(a lost update)"
        )
    return ""


def _check_write(op: Op, version: int, before: Any, anomalies: list[str]) -> Any:
    """Check one reported write against the model; the state after it."""
    assert op.result is not None
    why = _disagrees(op, before)
    if why:
        anomalies.append(f"{op.describe()} at version {version} {why}")
    if op.name == "update":
        if op.result.get("previous_version") != version - 1:
            anomalies.append(
                f"{op.describe()} reports previous version {op.result.get('previous_version')} "
                f"for version {version}"
            )
        return op.result["state"]  # follow the recorded outcome: no cascade of anomalies
    after, _ = _apply(op, before)
    return before if after is None else after


def _check_reads(done: list[Op], states: dict[int, Any], anomalies: list[str]) -> None:
    for op in done:
        assert op.result is not None
        if op.name == "get" and op.result["state"] != states[op.version]:
            anomalies.append(
                f"{op.describe()} read {op.result['state']!r} at version {op.version}, "
                f"which holds {states[op.version]!r}"
            )
        if op.name == "take" and not op.result["matched"]:
            after, _ = _apply(op, states[op.version])
            if after is not None:
                anomalies.append(
                    f"{op.describe()} found nothing at version {op.version}, "
                    "where an unclaimed item was (a stale read)"
                )


def _check_real_time(done: list[Op], anomalies: list[str]) -> None:
    """An op invoked after another completed must not see an older version."""
    by_completion = sorted(done, key=_completion)
    seen: Op | None = None  # the completed op with the highest version so far
    index = 0
    for op in sorted(done, key=lambda op: op.invoke):
        while index < len(by_completion) and _completion(by_completion[index]) < op.invoke:
            if seen is None or by_completion[index].version > seen.version:
                seen = by_completion[index]
            index += 1
        if seen is None:
            continue
        if op.version < seen.version or (op.is_write and op.version == seen.version):
            what = "lost update" if op.is_write else "stale read"
            anomalies.append(
                f"{what}: {op.describe()} saw version {op.version} though "
                f"{seen.describe()} had completed at version {seen.version} before it began"
            )


def check_queue(
    pushed: Iterable[Any],
    taken: Mapping[str, Iterable[Any]],
    maybe_pushed: Iterable[Any] = (),
) -> list[str]:
    """Anomalies of a drained queue: items lost, taken twice, or taken but never pushed.

    ``taken`` maps each taker to the items it got; ``maybe_pushed`` are items of pushes
    that were indeterminate (they may be taken, or not).
    """
    anomalies: list[str] = []
    expected = Counter(pushed)
    optional = Counter(maybe_pushed)
    got: Counter[Any] = Counter()
    for items in taken.values():
        got.update(items)
    for item, count in sorted(got.items(), key=repr):
        if item not in expected and item not in optional:
            anomalies.append(f"invented item {item!r}: taken but never pushed")
        elif count > expected[item] + optional[item]:
            anomalies.append(f"duplicated item {item!r}: taken {count} times")
    for item, count in sorted(expected.items(), key=repr):
        if got[item] < count:
            anomalies.append(f"lost item {item!r}: pushed but never taken")
    return anomalies


def check_entries(
    rows: Iterable[tuple[str, str, str]],
    returned: Mapping[str, Sequence[str] | None],
    tallies: Mapping[str, int | None],
) -> list[str]:
    """Anomalies of the rows ``(execution id, step, token)`` that atomic steps wrote.

    ``returned`` maps each execution to the tokens its steps returned, in step order
    (step ``"0"``, ``"1"``, ...), or ``None`` when it did not complete: its rows must then
    only not be duplicated. ``tallies`` maps each completed execution to the total of the
    tally its steps incremented in the same transactions (``None``: no tally found).
    """
    anomalies: list[str] = []
    by_step: dict[tuple[str, str], list[str]] = defaultdict(list)
    for execution, step, token in rows:
        by_step[(execution, step)].append(token)
    for (execution, step), tokens in sorted(by_step.items()):
        if len(tokens) > 1:
            anomalies.append(f"duplicated row: step {step} of {execution} committed {len(tokens)}")
        if execution not in returned:
            anomalies.append(f"invented row: step {step} of {execution}, not an execution")
            continue
        expected = returned[execution]
        if expected is None:
            continue
        index = int(step)
        if index >= len(expected):
            anomalies.append(f"invented row: step {step} of {execution}, which ran fewer steps")
        elif expected[index] not in tokens:
            anomalies.append(
                f"step {step} of {execution} returned {expected[index]!r}, but its row holds "
                f"{tokens!r} (the row of another attempt)"
            )
    for execution, expected in sorted(returned.items()):
        if expected is None:
            continue
        for index in range(len(expected)):
            if (execution, str(index)) not in by_step:
                anomalies.append(f"missing row: step {index} of {execution}")
        total = tallies.get(execution)
        if total != len(expected):
            anomalies.append(
                f"the tally of {execution} is {total}, for {len(expected)} committed steps"
            )
    return anomalies


def check_children(
    count: int,
    result: Mapping[str, Any] | None,
    children: Iterable[tuple[str, str]],
    rows: Iterable[tuple[str, str]],
) -> list[str]:
    """Anomalies of a parent that started ``count`` children and gathered them.

    ``result`` is the parent's result (``{"children": ids, "results": [[index, token],
    ...]}``), ``None`` if it did not complete; ``children`` the ``(id, status)`` of the
    executions whose parent it is; ``rows`` the probe rows ``(execution id, token)`` the
    children's one atomic step wrote. Every child exists once, completed, and committed
    its probe exactly once, with the token the parent gathered for it, at its index.
    """
    anomalies: list[str] = []
    if result is None:
        return ["the parent did not complete"]
    ids = list(result.get("children", []))
    results = list(result.get("results", []))
    if len(ids) != count or len(set(ids)) != count:
        anomalies.append(f"the parent started {len(set(ids))} distinct children of {count}")
    if len(results) != len(ids):
        anomalies.append(f"the parent gathered {len(results)} results for {len(ids)} children")
    statuses = dict(children)
    extra = sorted(set(statuses) - set(ids))
    if extra:
        anomalies.append(f"children the parent does not name: {extra[:5]}")
    tokens: dict[str, list[str]] = defaultdict(list)
    for execution, token in rows:
        tokens[execution].append(token)
    for index, (child, gathered) in enumerate(zip(ids, results, strict=False)):
        if statuses.get(child) != "completed":
            anomalies.append(f"child {child} is {statuses.get(child, 'missing')}")
        written = tokens.get(child, [])
        if len(written) != 1:
            anomalies.append(f"child {child} committed its probe {len(written)} times")
        if list(gathered) != [index, written[0] if written else None]:
            anomalies.append(f"the parent gathered {gathered!r} for child {index} ({child})")
    for execution in sorted(set(tokens) - set(ids)):
        anomalies.append(f"a probe row of {execution}, not a child of the parent")
    return anomalies


def tick_time(execution_id: str, name: str) -> float | None:
    """The tick (epoch seconds) a schedule's execution id names, ``None`` for another id
    (a trigger's, or not the schedule's)."""
    from datetime import datetime

    prefix = f"schedule:{name}:"
    if not execution_id.startswith(prefix) or not execution_id.endswith("Z"):
        return None
    try:
        moment = datetime.fromisoformat(execution_id[len(prefix) : -1] + "+00:00")
    except ValueError:
        return None
    return moment.timestamp()


def check_ticks(
    name: str,
    every: int,
    window: tuple[float, float],
    returned: Mapping[str, Sequence[str] | None],
    rows: Iterable[tuple[str, str]],
) -> list[str]:
    """Anomalies of the schedule ``name`` (``catch_up="all"``, ticks ``every`` seconds).

    ``returned`` maps every execution the schedule started to the tokens its steps
    returned (``None``: it did not complete); ``rows`` are the ``(execution id, token)``
    rows its one atomic step wrote. Every tick from ``window[0]`` to ``window[1]`` (epoch
    seconds) must have started an execution (none missed); every execution must name a
    tick (a multiple of ``every``), once (none ran twice: its row is committed once).
    """
    anomalies: list[str] = []
    ticks: dict[float, str] = {}
    for execution in sorted(returned):
        moment = tick_time(execution, name)
        if moment is None:
            anomalies.append(f"execution {execution} names no tick of {name}")
            continue
        if moment % every:
            anomalies.append(f"execution {execution} is off the schedule's ticks")
        ticks[moment] = execution
    first = -(-window[0] // every) * every
    moment = first
    while moment <= window[1]:
        if moment not in ticks:
            anomalies.append(f"missed tick {moment:.0f} of {name}")
        moment += every
    by_execution: dict[str, list[str]] = defaultdict(list)
    for execution, token in rows:
        by_execution[execution].append(token)
    for execution, tokens in sorted(by_execution.items()):
        if execution not in returned:
            anomalies.append(f"invented row of {execution}, which no tick started")
        elif len(tokens) > 1:
            anomalies.append(f"tick {execution} ran {len(tokens)} times")
    for execution, expected in sorted(returned.items()):
        if expected is None:
            continue
        tokens = by_execution.get(execution, [])
        if not tokens:
            anomalies.append(f"tick {execution} completed without its row")
        elif expected[0] not in tokens:
            anomalies.append(f"tick {execution} returned {expected[0]!r}, its row holds {tokens}")
    return anomalies


def check_queue_bounds(
    executions: list[dict[str, Any]],
    probes: list[dict[str, Any]],
    *,
    concurrency: int | None = None,
    per_key: int | None = None,
    rate: tuple[int, float] | None = None,
    started: list[str] | None = None,
) -> list[str]:
    """Verify a queue's executions against its limits.

    ``executions``: one dict per execution of the queue, ``{"id", "key", "priority",
    "created", "admitted", "finished", "status"}`` (times in seconds; ``admitted`` and
    ``finished`` ``None`` if it never was). ``probes``: what the executions' work noted,
    ``{"execution", "event": "begin" | "end", "at"}``, one pair per attempt of the work
    (a killed attempt leaves a ``begin`` alone). ``started``: the ids the starts returned.

    Anomalies: more than ``concurrency`` executions admitted and not finished at one
    instant, or more than ``per_key`` of one key, by the database's times, or running by
    the probes (an execution runs from its first ``begin`` to its last note); more than
    ``rate[0]`` admissions in a window of ``rate[1]`` seconds; a lower priority admitted
    while a higher one waited whose key had room; a start lost (no execution, or one that
    did not complete, or completed without its work) or doubled (two executions for one
    start, or an execution no start returned)."""
    found: list[str] = []
    by_id = {e["id"]: e for e in executions}
    if started is not None:
        counts = Counter(started)
        found += [f"start {i} returned {n} times" for i, n in counts.items() if n > 1]
        found += [f"start {i} has no execution" for i in counts if i not in by_id]
        found += [f"execution {i} was started by no start" for i in by_id if i not in counts]
    notes: dict[str, list[float]] = defaultdict(list)
    for probe in probes:
        notes[probe["execution"]].append(probe["at"])
    for e in executions:
        if e["status"] != "completed":
            found.append(f"execution {e['id']} ended {e['status']}")
        elif not notes.get(e["id"]):
            found.append(f"execution {e['id']} completed without its work")

    def most_at_once(intervals: list[tuple[float, float]]) -> tuple[int, float]:
        events = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
        now = most = 0
        when = 0.0
        for at, step in events:  # an end at the same instant as a begin comes first
            now += step
            if now > most:
                most, when = now, at
        return most, when

    admitted = [e for e in executions if e["admitted"] is not None]
    spans = {
        e["id"]: (e["admitted"], e["finished"] if e["finished"] is not None else float("inf"))
        for e in admitted
    }
    probe_spans = {i: (min(ts), max(ts)) for i, ts in notes.items() if i in by_id}
    for label, table in (("admitted", spans), ("running (probes)", probe_spans)):
        if concurrency is not None:
            most, when = most_at_once(list(table.values()))
            if most > concurrency:
                found.append(f"{most} executions {label} at once at {when:.3f}")
        if per_key is not None:
            keys: dict[str, list[tuple[float, float]]] = defaultdict(list)
            for i, span in table.items():
                if by_id[i]["key"]:
                    keys[by_id[i]["key"]].append(span)
            for key, intervals in keys.items():
                most, when = most_at_once(intervals)
                if most > per_key:
                    found.append(f"{most} executions of key {key!r} {label} at once at {when:.3f}")
    if rate is not None:
        limit, seconds = rate
        times = sorted(e["admitted"] for e in admitted)
        for index, at in enumerate(times):
            inside = sum(1 for t in times[index:] if t < at + seconds)
            if inside > limit:
                found.append(f"{inside} admissions in the {seconds} s from {at:.3f}")
                break

    def key_full(key: str, at: float) -> bool:
        if per_key is None or not key:
            return False
        holding = sum(1 for i, (a, b) in spans.items() if by_id[i]["key"] == key and a < at < b)
        return holding >= per_key

    for low in admitted:
        t = low["admitted"]
        for high in admitted:
            if (
                high["priority"] > low["priority"]
                and high["created"] < t < high["admitted"]
                and not key_full(high["key"], t)
            ):
                found.append(
                    f"{low['id']} (priority {low['priority']}) admitted at {t:.3f} while "
                    f"{high['id']} (priority {high['priority']}) waited"
                )
                break
    return found
