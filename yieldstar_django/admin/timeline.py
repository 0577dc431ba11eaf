"""The execution page's timeline: the execution's runs (``ExecutionRun``) and a page of its
heap steps on one time axis, from the execution's creation to its end (or to now), with
millisecond times and durations; the workers, the runs that never let their lease go and
the takeovers after them, the stores a wait names, sleeps, retries and their attempts.

Everything here is worked out from rows already read: the runs, the steps and the stores
waited on. A step "ran again" when a run that never let its lease go (its worker died, or
lost the lease) was at it: the first step no earlier run had recorded when the next run
began, if it calls a function (``run``, ``atomic``): that function was called again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from django.utils import timezone

from ..models.runtime import TERMINAL_STATUSES, Execution, ExecutionRun, ExecutionStep
from ..runtime.steps import step_target

__all__ = ["Timeline", "build_timeline", "duration", "stamp"]

#: How many runs the timeline draws (the last ones; a count says how many it left out).
MAX_RUNS: Final = 100
#: The step kinds whose function runs outside the heap's transaction: run twice, it ran
#: twice (an ``atomic`` step's writes roll back with its lost transaction, its code ran).
CALLED_KINDS: Final = frozenset({"run", "atomic"})


def stamp(value: datetime | None) -> str:
    """``2026-12-06 17:25:03.141`` (UTC, to the millisecond), or ``—``."""
    if value is None:
        return "—"
    value = timezone.localtime(value, timezone.get_fixed_timezone(0))
    return value.strftime("%Y-%m-%d %H:%M:%S.") + f"{value.microsecond // 1000:03d}"


def duration(seconds: float | None) -> str:
    """``0 ms``, ``12.4 ms``, ``3.201 s``, ``4 min 2 s``, ``2 h 5 min``, ``3 d 4 h``."""
    if seconds is None:
        return "—"
    seconds = max(seconds, 0.0)
    if seconds < 1:
        ms = seconds * 1000
        return f"{ms:.1f} ms" if ms < 10 and ms != int(ms) else f"{ms:.0f} ms"
    if seconds < 60:
        return f"{seconds:.3f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    if whole < 86400:
        return f"{whole // 3600} h {whole % 3600 // 60} min"
    return f"{whole // 86400} d {whole % 86400 // 3600} h"


@dataclass
class Bar:
    """One row of the timeline: a label, a bar from ``start`` to ``end`` and its notes."""

    label: str
    start: datetime
    end: datetime | None
    css: str
    notes: list[str] = field(default_factory=list)
    #: Set by ``Timeline.place``: the bar's left edge and width, in percent of the axis.
    left: float = 0.0
    width: float = 0.0
    open_end: bool = False

    @property
    def started(self) -> str:
        return stamp(self.start)

    @property
    def ended(self) -> str:
        return stamp(self.end)

    @property
    def started_time(self) -> str:
        """The start's time of day (the timeline's heading gives the date)."""
        return self.started[11:]

    @property
    def ended_time(self) -> str:
        return self.ended[11:] if self.end is not None else "…"

    @property
    def took(self) -> str:
        if self.end is None:
            return "—"
        return duration((self.end - self.start).total_seconds())


@dataclass
class Timeline:
    """What the template draws: the axis (``origin`` to ``until``, its ``ticks``), the run
    rows and the step rows."""

    origin: datetime
    until: datetime
    runs: list[Bar]
    steps: list[Bar]
    ticks: list[dict[str, Any]]
    runs_left_out: int = 0
    takeovers: int = 0
    ran_again: int = 0

    @property
    def started(self) -> str:
        return stamp(self.origin)

    @property
    def span(self) -> str:
        return duration((self.until - self.origin).total_seconds())

    def place(self, bar: Bar) -> None:
        total = max((self.until - self.origin).total_seconds(), 1e-6)
        start = min(max((bar.start - self.origin).total_seconds(), 0.0), total)
        end_at = bar.end if bar.end is not None else self.until
        bar.open_end = bar.end is None
        end = min(max((end_at - self.origin).total_seconds(), start), total)
        bar.left = round(100 * start / total, 3)
        bar.width = round(min(100 * (end - start) / total, 100 - bar.left), 3)


def _target_text(step: ExecutionStep) -> str:
    target = step_target(step.kind, step.fingerprint)
    if target is None:
        return ""
    if "function" in target:
        return str(target["function"])
    if "store" in target:
        return f"{target['store']}/{target['id']}"
    if "stores" in target:
        return " | ".join(f"{s['store']}/{s['id']}" for s in target["stores"])
    return str(target.get("description", ""))


def _run_bars(
    execution: Execution, runs: list[ExecutionRun], now: datetime
) -> tuple[list[Bar], int]:
    bars: list[Bar] = []
    takeovers = 0
    for index, run in enumerate(runs):
        following = runs[index + 1] if index + 1 < len(runs) else None
        notes = [run.worker or "worker not recorded"]
        end = run.ended_at
        css = "yieldstar-tl-run"
        if end is not None:
            notes.append(f"let the lease go: {run.outcome or 'released'}")
            if run.outcome == "abandoned":
                css += " yieldstar-tl-lost"
        elif following is not None:
            takeovers += 1
            end = following.started_at
            css += " yieldstar-tl-lost"
            notes.append(
                f"never let its lease go (its worker died or lost the lease): run "
                f"{following.number} took over at {stamp(following.started_at)}"
            )
        elif execution.lease_owner == run.lease_owner:
            expired = execution.lease_expires_at is not None and execution.lease_expires_at < now
            notes.append(
                "lease expired: a takeover is due" if expired else "running now (holds the lease)"
            )
            css += " yieldstar-tl-lost" if expired else " yieldstar-tl-live"
        else:
            css += " yieldstar-tl-lost"
            notes.append(
                f"stopped when the execution was {execution.status}"
                if execution.status in TERMINAL_STATUSES
                else "never let its lease go"
            )
            end = execution.finished_at
        bar = Bar(f"run {run.number}", run.started_at, end, css, notes)
        bars.append(bar)
    return bars, takeovers


def _lost_at(runs: list[ExecutionRun], steps: list[ExecutionStep]) -> dict[str, ExecutionRun]:
    """The step each run that never let its lease go (and was taken over) was at, by step
    key: the first step, in replay order, not recorded when the next run began, if it calls
    a function (the next run called it again)."""
    found: dict[str, ExecutionRun] = {}
    ordered = sorted(steps, key=lambda s: (s.position, s.pk or 0))
    for index, run in enumerate(runs[:-1]):
        if run.ended_at is not None:
            continue
        taken_over_at = runs[index + 1].started_at
        for step in ordered:
            done = step.recorded_at is not None and step.recorded_at < taken_over_at
            if not done:
                if step.kind in CALLED_KINDS:
                    found.setdefault(step.step_key, run)
                break
    return found


def _step_bar(
    step: ExecutionStep,
    lost: ExecutionRun | None,
    waited: list[dict[str, str]],
    execution: Execution,
) -> Bar:
    kind = step.kind
    target = _target_text(step)
    label = f"#{step.position} {step.step_key} · {kind}"
    notes: list[str] = []
    css = f"yieldstar-tl-step yieldstar-tl-{step.status}"
    end = step.recorded_at
    if kind == "sleep":
        css += " yieldstar-tl-sleep"
        notes.append(f"sleeps until {stamp(step.wake_at)}")
        if end is None and step.wake_at is not None:
            end = step.wake_at
    elif kind in ("take", "take_lease", "take_any") and step.status == "pending":
        css += " yieldstar-tl-wait"
        stores = [f"{w['store']}/{w['id']}" for w in waited if w["step"] == step.step_key]
        notes.append(f"waits on {', '.join(stores) if stores else target}")
        if step.wake_at is not None:
            notes.append(f"times out at {stamp(step.wake_at)}")
    elif target:
        notes.append(target)
    if step.attempts > 1 or (step.status == "pending" and kind in CALLED_KINDS):
        if step.status == "pending":
            notes.append(
                f"attempt {step.attempts} failed; attempt {step.attempts + 1} at "
                f"{stamp(step.wake_at)}"
            )
            css += " yieldstar-tl-retry"
            end = step.wake_at
        else:
            notes.append(f"{step.attempts} attempts")
    if lost is not None:
        css += " yieldstar-tl-twice"
        notes.append(
            f"ran twice: run {lost.number} ({lost.worker or 'worker not recorded'}) was "
            f"running it when it lost its lease, and run {lost.number + 1} ran it again"
        )
    if step.status == "pending" and end is None and execution.is_finished:
        end = execution.finished_at
    return Bar(label, step.created_at, end, css, notes)


def build_timeline(
    execution: Execution,
    runs: list[ExecutionRun],
    steps: list[ExecutionStep],
    waited: list[dict[str, str]],
    *,
    runs_total: int | None = None,
    now: datetime | None = None,
) -> Timeline:
    """The timeline of ``execution``: its ``runs`` (the last ``MAX_RUNS``, in order) and
    ``steps`` (a page of its heap), ``waited`` the stores it waits on (``waited_stores``)."""
    now = now or timezone.now()
    run_bars, takeovers = _run_bars(execution, runs, now)
    lost = _lost_at(runs, steps)
    step_bars = [_step_bar(step, lost.get(step.step_key), waited, execution) for step in steps]
    origin = min(
        [execution.created_at, *(b.start for b in run_bars), *(b.start for b in step_bars)]
    )
    ends = [b.end for b in [*run_bars, *step_bars] if b.end is not None]
    until = execution.finished_at or max([now, *ends])
    if execution.finished_at is not None and ends:
        until = max(until, *ends)
    if until <= origin:
        until = origin + timedelta(milliseconds=1)
    timeline = Timeline(
        origin,
        until,
        run_bars,
        step_bars,
        ticks=[],
        runs_left_out=max((runs_total or len(runs)) - len(runs), 0),
        takeovers=takeovers,
        ran_again=len(lost),
    )
    total = (until - origin).total_seconds()
    timeline.ticks = [{"left": 25 * i, "label": "+" + duration(total * i / 4)} for i in range(5)]
    for bar in [*run_bars, *step_bars]:
        timeline.place(bar)
    return timeline
