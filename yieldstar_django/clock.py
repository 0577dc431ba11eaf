"""The clock that durable timers read.

Every "when is it due" of the runtime and the relay (``step.sleep``, ``RetryableError``
delays, the wake outbox's ``available_at``) reads :func:`now`, so tests can move time with
``yieldstar_django.testing.advance_time`` and a one-day sleep takes milliseconds. Outside
tests the offset is zero and :func:`now` is ``django.utils.timezone.now()``. Execution
leases keep wall-clock time: they guard against dead workers, which no test clock can fake.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

from .conf import MAX_SECONDS, is_finite

__all__ = ["advance", "now", "offset", "reset"]

_offset = timedelta(0)

#: Room :func:`advance` keeps between the clock and ``datetime.max``: the longest durable
#: timer (``MAX_SECONDS``, 100 years) and a day for what is added to a due time.
_ROOM = timedelta(seconds=MAX_SECONDS, days=1)


def now() -> datetime:
    """The current time of durable timers: wall-clock time plus the test offset (aware)."""
    return timezone.now() + _offset


def offset() -> timedelta:
    """How far :func:`advance` has moved the clock ahead of wall-clock time."""
    return _offset


def advance(seconds: float | timedelta) -> None:
    """Move the clock ahead by ``seconds`` (a finite number >= 0, or a ``timedelta``), for
    this process.

    ``ValueError`` (and the clock unchanged) for a move that would leave less than the
    longest durable timer (100 years) between the clock and ``datetime.max`` (year 9999):
    a due time past it could not be represented, and every ``now()`` would overflow.
    """
    global _offset
    if isinstance(seconds, timedelta):
        seconds = seconds.total_seconds()
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise TypeError(f"advance() needs a number of seconds, not {seconds!r}")
    if not is_finite(seconds) or seconds < 0:
        raise ValueError(f"time only moves forward: advance() needs seconds >= 0, not {seconds}")
    try:
        moved = _offset + timedelta(seconds=seconds)
        timezone.now() + moved + _ROOM
    except OverflowError:
        raise ValueError(
            f"advance({seconds}) would move the clock past year 9999 less 100 years: the "
            "due time of the longest durable timer (100 years) could not be represented"
        ) from None
    _offset = moved


def reset() -> None:
    """Put the clock back on wall-clock time."""
    global _offset
    _offset = timedelta(0)
