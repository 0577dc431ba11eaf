"""Health checks: what tells a probe or an operator that executions are stuck or wakes late.

Each check is one query (two for the relay) and reads the invariant the runtime keeps
(``runtime/leases.py``): an execution that is not finished has a live lease holder, or an
unacknowledged wake intent the relay will deliver, or waiters. A check fails when:

- ``expired_leases``: an execution is ``running`` with a lease expired more than
  ``HEALTH_LEASE_GRACE_SECONDS`` ago (wall-clock time, as leases keep) and no
  unacknowledged wake intent left to resume it (its takeover timer is gone);
- ``stranded``: an execution is waiting (``pending``, ``waiting``, ``sleeping`` or
  ``retrying``) with no waiter, no wait for another execution's end (``ChildWait``) and
  no unacknowledged wake intent: nothing will ever resume it;
- ``overdue_timers``: a durable timer is unacknowledged more than
  ``HEALTH_OVERDUE_SECONDS`` after it was due (by the timers' clock);
- ``overdue_wakes``: an immediate wake intent is unacknowledged more than
  ``HEALTH_OVERDUE_SECONDS`` after it was written;
- ``relay``: no relay process recorded its heartbeat (``wakes/relay_log.py``) in the last
  ``HEALTH_RELAY_SECONDS``.

Counts are capped at :data:`COUNT_CAP` (a count of a million stuck rows costs what finding
them costs; the first thousand say enough). Used by ``python manage.py yieldstar_health``
and the admin index's banner (:func:`cached_report`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from django.core.cache import cache
from django.db import connections
from django.db.models import Exists, Max, OuterRef, Q, QuerySet
from django.utils import timezone

from . import clock
from .conf import database_alias, yieldstar_settings
from .models.relay import RelayHeartbeat
from .models.runtime import ChildWait, Execution, ExecutionStatus
from .models.stores import Waiter, WakeIntent

__all__ = [
    "CHECKS",
    "COUNT_CAP",
    "Finding",
    "HealthReport",
    "cached_report",
    "check_health",
    "forget_cached_report",
    "require_checks",
]

#: Every check, in the order reports list them.
CHECKS: Final = ("expired_leases", "stranded", "overdue_timers", "overdue_wakes", "relay")
#: The largest count a check reports (``count_capped`` says when it was reached).
COUNT_CAP: Final = 1000
#: How many example ids (executions, or wake intents' executions) a finding names.
EXAMPLES: Final = 5
#: The statuses of an execution that waits for something to resume it.
WAITING: Final = (
    ExecutionStatus.PENDING,
    ExecutionStatus.WAITING,
    ExecutionStatus.SLEEPING,
    ExecutionStatus.RETRYING,
)
_CACHE_KEY: Final = "yieldstar_django.health.report"


@dataclass(frozen=True)
class Finding:
    """The outcome of one check: ``ok``, how many rows fail it (``count``, at most
    :data:`COUNT_CAP`; ``count_capped`` if it reached it), a few execution ids
    (``examples``) and a sentence for people (``message``)."""

    check: str
    ok: bool
    count: int
    message: str
    examples: list[str] = field(default_factory=list)
    count_capped: bool = False


@dataclass(frozen=True)
class HealthReport:
    """Every finding of one health check; ``healthy`` when all are ``ok``."""

    database: str
    checked_at: datetime
    findings: list[Finding]

    @property
    def healthy(self) -> bool:
        return all(finding.ok for finding in self.findings)

    @property
    def problems(self) -> list[Finding]:
        return [finding for finding in self.findings if not finding.ok]

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (``yieldstar_health --json``)."""
        return {
            "healthy": self.healthy,
            "database": self.database,
            "checked_at": self.checked_at.isoformat(),
            "checks": {
                finding.check: {k: v for k, v in asdict(finding).items() if k != "check"}
                for finding in self.findings
            },
        }


def _open_intents(execution: Any = None) -> QuerySet[WakeIntent]:
    rows = WakeIntent.objects.filter(delivered_at__isnull=True)
    return rows if execution is None else rows.filter(execution_id=execution)


def _counted(
    check: str, rows: QuerySet[Any], id_field: str, message: str, ok_message: str
) -> Finding:
    count = rows[: COUNT_CAP + 1].count()
    capped = count > COUNT_CAP
    count = min(count, COUNT_CAP)
    if not count:
        return Finding(check, True, 0, ok_message)
    examples = list(dict.fromkeys(rows.values_list(id_field, flat=True)[: EXAMPLES * 4]))
    shown = f"{count}{'+' if capped else ''}"
    return Finding(
        check,
        False,
        count,
        message.format(count=shown),
        [str(e) for e in examples[:EXAMPLES]],
        capped,
    )


def _expired_leases(using: str, now: datetime) -> Finding:
    grace = yieldstar_settings.HEALTH_LEASE_GRACE_SECONDS
    cutoff = now - timedelta(seconds=grace)
    rows = (
        Execution.objects.using(using)
        .filter(status=ExecutionStatus.RUNNING)
        .filter(Q(lease_expires_at__lt=cutoff) | Q(lease_expires_at__isnull=True))
        .filter(~Exists(_open_intents(OuterRef("pk"))))
        .order_by()
    )
    return _counted(
        "expired_leases",
        rows,
        "pk",
        f"{{count}} running execution(s) with a lease expired more than {grace:g}s ago and "
        "no wake intent left to take them over",
        "no running execution is left with an expired lease",
    )


def _stranded(using: str) -> Finding:
    rows = (
        Execution.objects.using(using)
        .filter(status__in=WAITING)
        .filter(~Exists(Waiter.objects.filter(execution_id=OuterRef("pk"))))
        .filter(~Exists(ChildWait.objects.filter(execution_id=OuterRef("pk"))))
        .filter(~Exists(_open_intents(OuterRef("pk"))))
        .order_by()
    )
    return _counted(
        "stranded",
        rows,
        "pk",
        "{count} waiting execution(s) with no waiter and no timer or wake to resume them",
        "every waiting execution has a waiter, a timer or a wake",
    )


def _overdue(using: str, *, timers: bool) -> Finding:
    seconds = yieldstar_settings.HEALTH_OVERDUE_SECONDS
    cutoff = clock.now() - timedelta(seconds=seconds)
    rows = WakeIntent.objects.using(using).filter(delivered_at__isnull=True)
    if timers:
        rows = rows.filter(due_at__lt=cutoff).order_by("due_at")
        return _counted(
            "overdue_timers",
            rows,
            "execution_id",
            f"{{count}} durable timer(s) still unacknowledged more than {seconds:g}s after "
            "they were due",
            "no durable timer is overdue",
        )
    rows = rows.filter(due_at__isnull=True, created_at__lt=cutoff).order_by("created_at")
    return _counted(
        "overdue_wakes",
        rows,
        "execution_id",
        f"{{count}} wake intent(s) still unacknowledged more than {seconds:g}s after they "
        "were written",
        "no wake intent is overdue",
    )


def _relay(using: str, now: datetime) -> Finding:
    seconds = yieldstar_settings.HEALTH_RELAY_SECONDS
    last = RelayHeartbeat.objects.using(using).aggregate(last=Max("seen_at"))["last"]
    if last is None:
        return Finding(
            "relay",
            False,
            0,
            "no relay has recorded a heartbeat yet: run `python manage.py yieldstar_relay` "
            "(or the beat task relay_wakes)",
        )
    ago = (now - last).total_seconds()
    if ago > seconds:
        return Finding(
            "relay", False, 0, f"no relay seen for {ago:.0f}s (last at {last.isoformat()})"
        )
    alive = RelayHeartbeat.objects.using(using).filter(
        seen_at__gte=now - timedelta(seconds=seconds)
    )
    return Finding("relay", True, 0, f"{alive.count()} relay(s) seen in the last {seconds:g}s")


def require_checks(names: Iterable[str]) -> tuple[str, ...]:
    """``names`` in report order; ``ValueError`` naming any that is not a check."""
    chosen = set(names)
    unknown = sorted(chosen - set(CHECKS))
    if unknown:
        raise ValueError(f"unknown health check(s) {unknown}; choose among {list(CHECKS)}")
    return tuple(name for name in CHECKS if name in chosen)


def check_health(using: str | None = None, *, only: Sequence[str] | None = None) -> HealthReport:
    """Run the checks (all, or those named in ``only``; none: only connect) on ``using``
    (``DATABASE_ALIAS`` by default) and return the report. Reads only. A database error
    propagates."""
    alias = database_alias(using)
    names = CHECKS if only is None else require_checks(only)
    connections[alias].ensure_connection()  # no check at all still needs a database
    now = timezone.now()
    run = {
        "expired_leases": lambda: _expired_leases(alias, now),
        "stranded": lambda: _stranded(alias),
        "overdue_timers": lambda: _overdue(alias, timers=True),
        "overdue_wakes": lambda: _overdue(alias, timers=False),
        "relay": lambda: _relay(alias, now),
    }
    return HealthReport(alias, now, [run[name]() for name in names])


def cached_report() -> HealthReport:
    """``check_health()``, kept ``HEALTH_CACHE_SECONDS`` in Django's default cache (the
    admin index's banner)."""
    seconds = yieldstar_settings.HEALTH_CACHE_SECONDS
    if seconds > 0:
        found = cache.get(_CACHE_KEY)
        if isinstance(found, HealthReport) and found.database == database_alias():
            return found
    report = check_health()
    if seconds > 0:
        cache.set(_CACHE_KEY, report, seconds)
    return report


def forget_cached_report() -> None:
    """Drop the report :func:`cached_report` keeps (tests; after a repair)."""
    cache.delete(_CACHE_KEY)
