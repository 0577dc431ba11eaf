"""The history checker's own tests: valid histories pass, and every kind of anomaly the
fault suite must catch is flagged (lost update, stale read, duplicate claim, invented
item, ...). Pure Python: no database, no processes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .checker import (
    Op,
    check_entries,
    check_queue,
    check_queue_bounds,
    check_register,
    check_ticks,
    load_history,
)

EMPTY: dict[str, Any] = {"items": []}
ZERO: dict[str, Any] = {"total": 0}


def items(*pairs: tuple[str, str | None]) -> dict[str, Any]:
    return {"items": [{"value": v, "claimed_by": by} for v, by in pairs]}


def push(values: list[str], t: float, done: float | None, version: int, state: Any) -> Op:
    result = None
    if done is not None:
        result = {"version": version, "previous_version": version - 1, "state": state}
    return Op("p", "update", t, done, result, {"kind": "push", "values": values})


def push_ab() -> Op:
    """The push of ``a`` and ``b`` (invoked at 0, done at 1) that commits version 1."""
    return push(["a", "b"], 0, 1, 1, items(("a", None), ("b", None)))


def take(by: str, t: float, done: float | None, version: int, selected: Any, step: str = "") -> Op:
    result = None
    if done is not None:
        result = {"matched": selected is not None, "version": version, "selected": selected}
    return Op(by, "take", t, done, result, {"kind": "take", "by": by}, step or None)


def add(amount: int, t: float, done: float | None, version: int, total: int) -> Op:
    result = None
    if done is not None:
        result = {"version": version, "previous_version": version - 1, "state": {"total": total}}
    return Op("w", "update", t, done, result, {"kind": "add", "amount": amount})


def get(t: float, done: float, version: int, state: Any) -> Op:
    return Op("r", "get", t, done, {"version": version, "state": state})


def claimed(value: str, by: str) -> dict[str, Any]:
    return {"value": value, "claimed_by": by}


def assert_flagged(history: list[Op], initial: dict[str, Any], anomaly: str) -> None:
    """Asserts that one of the anomalies the checker finds in ``history`` names ``anomaly``."""
    anomalies = check_register(history, initial)
    assert any(anomaly in a for a in anomalies), anomalies


# -- histories that are linearizable ----------------------------------------------------


def test_sequential_push_and_takes_pass() -> None:
    history = [
        push_ab(),
        take("e1", 2, 3, 2, claimed("a", "e1")),
        take("e2", 4, 5, 3, claimed("b", "e2")),
        take("e3", 6, 7, 3, None),
        get(8, 9, 3, items(("a", "e1"), ("b", "e2"))),
    ]
    assert check_register(history, EMPTY) == []


def test_concurrent_ops_may_commit_in_either_order() -> None:
    # Both overlap; version order (e2 first) is a valid linearization.
    history = [
        push_ab(),
        take("e1", 2, 6, 3, claimed("b", "e1")),
        take("e2", 3, 5, 2, claimed("a", "e2")),
    ]
    assert check_register(history, EMPTY) == []


def test_an_indeterminate_write_may_have_taken_effect() -> None:
    history = [
        add(1, 0, 1, 1, 1),
        add(5, 2, None, 0, 0),  # killed: it did commit version 2
        add(2, 3, 4, 3, 8),
    ]
    assert check_register(history, ZERO) == []


def test_an_indeterminate_write_may_have_had_no_effect() -> None:
    history = [add(1, 0, 1, 1, 1), add(5, 2, None, 0, 0), add(2, 3, 4, 2, 3)]
    assert check_register(history, ZERO) == []


def test_a_ledger_replay_returns_the_first_result_later() -> None:
    # The first invocation commits and dies; the replay (same step) returns its result
    # after another write completed.
    history = [
        push_ab(),
        take("e1", 2, None, 0, None, step="e1/0"),
        take("e2", 4, 5, 3, claimed("b", "e2")),
        take("e1", 6, 7, 2, claimed("a", "e1"), step="e1/0"),
    ]
    assert check_register(history, EMPTY) == []


# -- histories that MUST be flagged -----------------------------------------------------


def test_lost_update_two_writes_on_one_version() -> None:
    history = [add(1, 0, 1, 1, 1), add(2, 0, 1, 1, 2)]
    assert_flagged(history, ZERO, "committed twice")


def test_lost_update_a_write_that_ignores_the_one_before() -> None:
    history = [add(1, 0, 1, 1, 1), add(2, 2, 3, 2, 2)]  # 1 + 2 is 3, not 2
    assert_flagged(history, ZERO, "lost update")


def test_lost_update_in_real_time() -> None:
    # The second write began after version 2 completed, yet reports version 2 too... or
    # an older one: here it reports version 1 while version 2 completed before it began.
    history = [add(1, 3, 4, 1, 1), add(2, 0, 2, 2, 3)]
    assert_flagged(history, ZERO, "lost update")


def test_stale_read() -> None:
    history = [add(1, 0, 1, 1, 1), add(1, 2, 3, 2, 2), get(4, 5, 1, {"total": 1})]
    assert_flagged(history, ZERO, "stale read")


def test_a_take_that_finds_nothing_while_an_item_waits_is_stale() -> None:
    history = [push(["a"], 0, 1, 1, items(("a", None))), take("e1", 0.5, 2, 1, None)]
    assert_flagged(history, EMPTY, "stale read")


def test_a_read_of_a_state_no_version_had() -> None:
    history = [add(1, 0, 1, 1, 1), get(2, 3, 1, {"total": 7})]
    assert_flagged(history, ZERO, "read {'total': 7}")


def test_duplicate_claim() -> None:
    history = [
        push_ab(),
        take("e1", 2, 3, 2, claimed("a", "e1")),
        take("e2", 4, 5, 3, claimed("a", "e2")),  # "a" again
    ]
    assert_flagged(history, EMPTY, "duplicate claim")


def test_duplicate_claim_of_one_version() -> None:
    history = [
        push_ab(),
        take("e1", 2, 3, 2, claimed("a", "e1")),
        take("e2", 2, 3, 2, claimed("a", "e2")),
    ]
    assert_flagged(history, EMPTY, "committed twice")


def test_invented_item() -> None:
    history = [
        push(["a"], 0, 1, 1, items(("a", None))),
        take("e1", 2, 3, 2, claimed("a", "e1")),
        take("e2", 4, 5, 3, claimed("z", "e2")),
    ]
    assert_flagged(history, EMPTY, "invented")


def test_a_version_no_operation_explains() -> None:
    history = [add(1, 0, 1, 1, 1), add(1, 2, 3, 3, 3)]  # who committed version 2?
    assert_flagged(history, ZERO, "no operation")


def test_a_replayed_step_that_returns_another_result() -> None:
    history = [
        push_ab(),
        take("e1", 2, 3, 2, claimed("a", "e1"), step="e1/0"),
        take("e1", 4, 5, 3, claimed("b", "e1"), step="e1/0"),  # applied twice
    ]
    assert_flagged(history, EMPTY, "different results")


def test_an_unknown_model_operation_is_an_error_not_a_pass() -> None:
    history = [Op("w", "update", 0, 1, {"version": 1, "previous_version": 0, "state": {}}, {})]
    with pytest.raises(ValueError, match="no model operation"):
        check_register(history, ZERO)


# -- the queue check --------------------------------------------------------------------


def test_queue_drained_exactly_once_passes() -> None:
    assert check_queue(["a", "b", "c"], {"e1": ["a", "c"], "e2": ["b"]}) == []


def test_queue_lost_duplicated_and_invented_items_are_flagged() -> None:
    anomalies = check_queue(["a", "b", "c"], {"e1": ["a", "a"], "e2": ["z"]})
    assert "lost item 'b': pushed but never taken" in anomalies
    assert "lost item 'c': pushed but never taken" in anomalies
    assert "duplicated item 'a': taken 2 times" in anomalies
    assert "invented item 'z': taken but never pushed" in anomalies


def test_queue_items_of_an_indeterminate_push_may_be_taken_once() -> None:
    assert check_queue(["a"], {"e1": ["a", "m"]}, maybe_pushed=["m", "n"]) == []
    assert check_queue(["a"], {"e1": ["a", "m", "m"]}, maybe_pushed=["m"]) != []


# -- reading recorded files -------------------------------------------------------------


def test_load_history_pairs_invokes_with_completions(tmp_path: Path) -> None:
    lines = [
        {"id": "1", "type": "invoke", "time": 1.0, "process": "w1", "store": "s/1",
         "op": "update", "args": {"kind": "add", "amount": 1}, "step": None},
        {"id": "2", "type": "invoke", "time": 1.5, "process": "w1", "store": "s/1",
         "op": "update", "args": {"kind": "add", "amount": 5}, "step": "e/0"},
        {"id": "1", "type": "ok", "time": 2.0, "instance": "i",
         "result": {"version": 1, "previous_version": 0, "state": {"total": 1}}},
        {"id": "2", "type": "fail", "time": 2.5, "error": "OperationalError"},
    ]  # fmt: skip
    text = "\n".join(json.dumps(line) for line in lines) + '\n{"id": "3", "ty'
    (tmp_path / "w1.jsonl").write_text(text)
    ops = load_history(tmp_path)["s/1"]
    assert [(op.name, op.complete, op.step) for op in ops] == [
        ("update", 2.0, None),
        ("update", None, "e/0"),
    ]
    assert check_register(ops, ZERO) == []


def test_indeterminate_writes_are_placed_by_what_a_later_update_recorded() -> None:
    # Two killed takes, one of which committed version 2; only the push at version 4
    # shows which (e2 claimed "a"): the search must not settle for the first that fits.
    history = [
        push_ab(),
        take("e1", 2, None, 0, None, step="e1/0"),
        take("e2", 2, None, 0, None, step="e2/0"),
        take("e3", 3, 4, 3, claimed("b", "e3")),
        push(["c"], 5, 6, 4, items(("a", "e2"), ("b", "e3"), ("c", None))),
    ]
    assert check_register(history, EMPTY) == []


def test_entries_one_row_per_step_each_the_one_returned_pass() -> None:
    rows = [("e1", "0", "a"), ("e1", "1", "b"), ("e2", "0", "c")]
    returned = {"e1": ["a", "b"], "e2": None}
    assert check_entries(rows, returned, {"e1": 2, "e2": None}) == []


def test_entries_duplicated_missing_invented_and_foreign_rows_are_flagged() -> None:
    rows = [
        ("e1", "0", "a"),
        ("e1", "0", "x"),  # a second commit of step 0
        ("e1", "2", "z"),  # a step that never ran
        ("e2", "0", "y"),  # the row of another attempt than the one returned
        ("e9", "0", "w"),  # no such execution
        ("e3", "0", "u"),
        ("e3", "0", "v"),  # duplicated in an unfinished execution too
    ]
    returned = {"e1": ["a", "b"], "e2": ["c"], "e3": None}
    found = check_entries(rows, returned, {"e1": 2, "e2": 1, "e3": None})
    assert any(a.startswith("duplicated row: step 0 of e1") for a in found), found
    assert any(a.startswith("duplicated row: step 0 of e3") for a in found), found
    assert "missing row: step 1 of e1" in found
    assert any(a.startswith("invented row: step 2 of e1") for a in found), found
    assert any(a.startswith("invented row: step 0 of e9") for a in found), found
    assert any(a.startswith("step 0 of e2 returned 'c'") for a in found), found
    assert len(found) == 6, found


def test_entries_a_tally_that_differs_from_the_rows_is_flagged() -> None:
    rows = [("e1", "0", "a")]
    found = check_entries(rows, {"e1": ["a"]}, {"e1": 2})
    assert found == ["the tally of e1 is 2, for 1 committed steps"]
    assert check_entries(rows, {"e1": ["a"]}, {}) == [
        "the tally of e1 is None, for 1 committed steps"
    ]


def test_check_children_passes_a_clean_gather_and_flags_each_anomaly() -> None:
    from .checker import check_children

    ids = ["p:c:0", "p:c:1"]
    result = {"children": ids, "results": [[0, "t0"], [1, "t1"]]}
    children = [(ids[0], "completed"), (ids[1], "completed")]
    rows = [(ids[0], "t0"), (ids[1], "t1")]
    assert check_children(2, result, children, rows) == []
    assert check_children(2, None, children, rows) == ["the parent did not complete"]
    twice = check_children(2, result, children, [*rows, (ids[1], "t1b")])
    assert twice == [f"child {ids[1]} committed its probe 2 times"]
    stray = check_children(2, result, [*children, ("p:c:9", "completed")], rows)
    assert stray == ["children the parent does not name: ['p:c:9']"]
    wrong = {"children": ids, "results": [[0, "t0"], [1, "other"]]}
    assert check_children(2, wrong, children, rows) == [
        f"the parent gathered [1, 'other'] for child 1 ({ids[1]})"
    ]
    lost = check_children(2, result, children[:1], rows[:1])
    assert lost == [
        f"child {ids[1]} is missing",
        f"child {ids[1]} committed its probe 0 times",
        f"the parent gathered [1, 't1'] for child 1 ({ids[1]})",
    ]


# --- check_ticks -----------------------------------------------------------------------

TICK = "schedule:every:{}Z"


def tick_id(second: int) -> str:
    from datetime import UTC, datetime

    return TICK.format(datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S"))


def ticks(seconds: range) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    returned: dict[str, Any] = {tick_id(s): [f"t{s}"] for s in seconds}
    rows = [(tick_id(s), f"t{s}") for s in seconds]
    return returned, rows


def test_check_ticks_accepts_one_run_per_tick() -> None:
    returned, rows = ticks(range(1000, 1060))
    assert check_ticks("every", 1, (1000.0, 1059.0), returned, rows) == []


def test_check_ticks_finds_a_missed_a_doubled_and_an_invented_tick() -> None:
    returned, rows = ticks(range(1000, 1060))
    del returned[tick_id(1030)]
    rows = [r for r in rows if r[0] != tick_id(1030)]
    rows.append((tick_id(1040), "again"))
    rows.append(("schedule:every:nope", "x"))
    found = check_ticks("every", 1, (1000.0, 1059.0), returned, rows)
    assert any("missed tick 1030" in a for a in found), found
    assert any("ran 2 times" in a for a in found), found
    assert any("invented row" in a for a in found), found


def test_check_ticks_finds_a_tick_whose_row_is_missing_or_another() -> None:
    returned, rows = ticks(range(1000, 1010))
    rows = [r for r in rows if r[0] != tick_id(1003)]
    rows = [(e, "other") if e == tick_id(1004) else (e, t) for e, t in rows]
    found = check_ticks("every", 1, (1000.0, 1009.0), returned, rows)
    assert any("completed without its row" in a for a in found), found
    assert any("its row holds" in a for a in found), found


def run(i: str, admitted: float, finished: float, **fields: Any) -> dict[str, Any]:
    return {
        "id": i,
        "key": fields.get("key", ""),
        "priority": fields.get("priority", 0),
        "created": fields.get("created", admitted),
        "admitted": admitted,
        "finished": finished,
        "status": fields.get("status", "completed"),
    }


def probes_of(*executions: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"execution": e["id"], "event": event, "at": at}
        for e in executions
        for event, at in (("begin", e["admitted"] + 0.01), ("end", e["finished"] - 0.01))
    ]


def test_a_queue_within_its_limits_passes() -> None:
    runs = [run("a", 0, 1, key="k"), run("b", 0, 1), run("c", 1, 2, key="k"), run("d", 1.5, 3)]
    assert (
        check_queue_bounds(
            runs, probes_of(*runs), concurrency=2, per_key=1, rate=(2, 1.0), started=list("abcd")
        )
        == []
    )


@pytest.mark.parametrize(
    ("runs", "limits", "anomaly"),
    [
        ([run("a", 0, 2), run("b", 1, 3), run("c", 1.5, 4)], {"concurrency": 2}, "3 executions"),
        ([run("a", 0, 2, key="k"), run("b", 1, 3, key="k")], {"per_key": 1}, "key 'k'"),
        ([run("a", 0, 9), run("b", 0.5, 9), run("c", 0.9, 9)], {"rate": (2, 1.0)}, "admissions"),
        (
            [
                run("a", 0, 1),
                run("lo", 1, 2, created=0.1),
                run("hi", 2, 3, created=0.2, priority=1),
            ],
            {"concurrency": 1},
            "waited",
        ),
        ([run("a", 0, 1, status="failed")], {}, "ended failed"),
    ],
)
def test_queue_anomalies_are_flagged(
    runs: list[dict[str, Any]], limits: dict[str, Any], anomaly: str
) -> None:
    found = check_queue_bounds(runs, probes_of(*runs), **limits)
    assert any(anomaly in f for f in found), found


def test_lost_and_doubled_starts_are_flagged() -> None:
    runs = [run("a", 0, 1), run("b", 1, 2)]
    found = check_queue_bounds(runs, probes_of(runs[0]), started=["a", "a", "c"])
    assert any("returned 2 times" in f for f in found)
    assert any("start c has no execution" in f for f in found)
    assert any("execution b was started by no start" in f for f in found)
    assert any("b completed without its work" in f for f in found)


def test_a_killed_attempt_counts_from_its_first_note() -> None:
    """Two attempts of one execution's work (the first killed: a ``begin`` alone) are one
    running execution; another that ran between them overlaps it."""
    runs = [run("a", 0, 5), run("b", 5, 6)]
    probes = [
        {"execution": "a", "event": "begin", "at": 0.1},
        {"execution": "a", "event": "begin", "at": 3.0},
        {"execution": "a", "event": "end", "at": 4.0},
        {"execution": "b", "event": "begin", "at": 2.0},  # b ran while a's slot was held
        {"execution": "b", "event": "end", "at": 2.5},
    ]
    assert any("running (probes)" in f for f in check_queue_bounds(runs, probes, concurrency=1))
