"""The ``YIELDSTAR`` settings dict: every key declared once, read through one typed object.

Use it as::

    from yieldstar_django.conf import yieldstar_settings

    yieldstar_settings.CAS_MAX_ATTEMPTS

Each key is a :class:`Setting` of :class:`YieldstarSettings`: its default, its type (the
attribute's), the rule the system checks apply (:mod:`yieldstar_django.checks`), and the
text of its section on the settings reference page (``docs/reference/settings.md``,
written by ``scripts/settings_page.py``; a test fails when the page and this table
differ).

Nothing here reads Django's settings at import time: every attribute reads
``settings.YIELDSTAR`` on first access and caches it. The cache is dropped on Django's
``setting_changed`` signal (connected by the app's ``ready()``), so
``override_settings(YIELDSTAR=...)`` takes effect at once. Values are not validated on
read; the system checks report bad values at startup.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from datetime import timedelta
from types import MappingProxyType
from typing import Any, Final, Generic, TypeVar, cast, overload

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from .core.durable import DEFAULT_MAX_NODES

__all__ = [
    "DEFAULTS",
    "MAX_DEPTH_LIMIT",
    "MAX_INTEGER",
    "MAX_SECONDS",
    "POOLER_MODES",
    "SETTINGS",
    "SETTING_NAME",
    "Rule",
    "Setting",
    "WakeBackend",
    "YieldstarSettings",
    "connect_signals",
    "is_duration",
    "is_finite",
    "reload_settings",
    "timeout_seconds",
    "yieldstar_settings",
]

T = TypeVar("T")

SETTING_NAME: Final = "YIELDSTAR"

#: A wake backend: ``deliver(wakes)`` hands every wake (each has ``.execution_id``
#: and ``.workflow_id``) to something that will resume the execution. It returns once
#: they are handed over and raises otherwise; the relay retries what was not delivered.
WakeBackend = Callable[[Sequence[Any]], object]

#: The values of ``POOLER``: no pooler (or one in session mode), or a transaction pooler.
POOLER_MODES: Final = (None, "session", "transaction")

MIB: Final = 1024 * 1024
KIB: Final = 1024
#: Headroom over ``MAX_STATE_BYTES`` for the default ``API_MAX_BODY_BYTES``.
API_BODY_HEADROOM: Final = 64 * KIB
#: The longest duration a setting (or a management command's argument) may give, in
#: seconds: 100 years. Longer ones overflow the datetime arithmetic they feed (a wake's due
#: time, a lease's expiry, a retention cutoff) or a thread's wait.
MAX_SECONDS: Final = 100 * 365 * 24 * 3600


def is_finite(value: float) -> bool:
    """Whether a number is finite. An ``int`` always is: ``math.isfinite`` raises
    ``OverflowError`` for one past a float's range (``10**400``)."""
    return isinstance(value, int) or math.isfinite(value)


#: The largest integer a setting may give: 2**62, with room under the 64-bit integers it
#: meets (PostgreSQL's ``bigint``, the size of a read) for what is added to it.
MAX_INTEGER: Final = 2**62
#: The largest ``MAX_DEPTH``. Python's ``json`` recurses once per level, so a value encoded
#: from a shallow call stack may not decode from a deeper one (a Celery task, a long
#: middleware chain) when its depth nears the recursion limit (1,000 on Python 3.11).
MAX_DEPTH_LIMIT: Final = 512


# --- rules ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """What a value must be: ``accepts(value)``, and ``expected`` in words for messages."""

    accepts: Callable[[object], bool]
    expected: str


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and is_finite(value)


def int_at_least(minimum: int, unit: str = "") -> Rule:
    """An ``int`` (not a ``bool``) >= ``minimum``, at most ``MAX_INTEGER``."""
    what = f"an integer{' number of ' + unit if unit else ''} >= {minimum} and <= 2**62"
    return Rule(lambda value: _is_int(value) and minimum <= cast(int, value) <= MAX_INTEGER, what)


def bytes_at_least(minimum: int) -> Rule:
    """An ``int`` number of bytes >= ``minimum``."""
    return int_at_least(minimum, "bytes")


def timeout_seconds(timeout: Any, what: str) -> float | None:
    """A timeout given as seconds or a ``timedelta`` (``None`` stays ``None``), as a
    ``float``; ``TypeError`` for what is not a number, ``ValueError`` for one that is not
    positive or is over ``MAX_SECONDS``."""
    if timeout is None:
        return None
    if isinstance(timeout, timedelta):
        timeout = timeout.total_seconds()
    if not _is_number(timeout):
        raise TypeError(f"{what} is a number of seconds, not {timeout!r}")
    if not is_duration(timeout, 0, inclusive=False):
        raise ValueError(f"{what} must be a positive number of seconds up to {MAX_SECONDS}")
    return float(timeout)


def is_duration(value: object, minimum: float, *, inclusive: bool = True) -> bool:
    """Whether ``value`` is a number of seconds >= ``minimum`` (> when not ``inclusive``)
    and <= ``MAX_SECONDS``: finite, and not a ``bool``."""
    if not _is_number(value):
        return False
    seconds = cast(float, value)
    above = seconds >= minimum if inclusive else seconds > minimum
    return above and seconds <= MAX_SECONDS


def seconds_at_least(minimum: float) -> Rule:
    """A number of seconds >= ``minimum``, at most ``MAX_SECONDS``."""
    return Rule(
        lambda value: is_duration(value, minimum),
        f"a number of seconds >= {minimum:g} and <= {MAX_SECONDS} (100 years)",
    )


def seconds_above(minimum: float) -> Rule:
    """A number of seconds > ``minimum``, at most ``MAX_SECONDS``."""
    return Rule(
        lambda value: is_duration(value, minimum, inclusive=False),
        f"a number of seconds > {minimum:g} and <= {MAX_SECONDS} (100 years)",
    )


def optional(rule: Rule) -> Rule:
    """``None``, or what ``rule`` accepts."""
    return Rule(lambda value: value is None or rule.accepts(value), f"None or {rule.expected}")


BOOLEAN: Final = Rule(lambda value: isinstance(value, bool), "True or False")
NON_EMPTY_TEXT: Final = Rule(
    lambda value: isinstance(value, str) and bool(value), "a non-empty str"
)


# --- the table -----------------------------------------------------------------------------


@dataclass(eq=False)
class Setting(Generic[T]):
    """One ``YIELDSTAR`` key, declared once: its default, the rule the system checks apply
    (``None``: checked elsewhere), whether it is pinned public API, how its default is
    shown (``shown``; by default the default itself as Python writes it, in backticks) and
    its documentation (Markdown). As an attribute of :class:`YieldstarSettings` it reads
    the configured value, typed ``T``."""

    default: object
    _: KW_ONLY
    doc: str
    shown: str = ""
    rule: Rule | None = None
    pinned: bool = False
    import_path: bool = False
    derive: Callable[[YieldstarSettings, object], T] | None = None
    name: str = field(default="", init=False)

    def __post_init__(self) -> None:
        if not self.shown:
            default = self.default
            self.shown = f'`"{default}"`' if isinstance(default, str) else f"`{default!r}`"

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> Setting[T]: ...

    @overload
    def __get__(self, obj: YieldstarSettings, owner: type[Any]) -> T: ...

    def __get__(self, obj: YieldstarSettings | None, owner: type[Any]) -> Setting[T] | T:
        if obj is None:
            return self
        value = obj.get(self.name)
        return self.derive(obj, value) if self.derive is not None else cast(T, value)

    def __repr__(self) -> str:
        return f"<Setting {self.name} = {self.default!r}>"


def _api_max_body_bytes(current: YieldstarSettings, value: object) -> int:
    """``API_MAX_BODY_BYTES``: ``MAX_STATE_BYTES`` + 64 KiB when unset."""
    return current.MAX_STATE_BYTES + API_BODY_HEADROOM if value is None else cast(int, value)


class YieldstarSettings:
    """Typed, lazily read view of ``settings.YIELDSTAR`` merged over the defaults.

    Every class attribute that is a :class:`Setting` is a key. Attribute reads never
    raise for a missing key (the default applies). A ``YIELDSTAR`` that is not a mapping
    raises ``ImproperlyConfigured`` on the first read.
    """

    WAKE_BACKEND = Setting[str | WakeBackend](
        "yieldstar_django.wakes.celery_backend",
        pinned=True,
        import_path=True,
        doc="""\
Dotted path of a callable `deliver(wakes)` (a callable may also be given directly). Each
wake has `.execution_id` and `.workflow_id`. The backend returns once the wakes are handed
over (for the default, enqueued as the Celery task `yieldstar_django.resume_execution`, or
`yieldstar_django.resume_executions` for groups of more than 64 at once) and raises
otherwise; the [relay](../operations/relay.md) re-delivers the wakes that were not
acknowledged. Imported on first use, not at startup; `yieldstar.E002` reports a path that
does not import.
""",
    )

    CAS_MAX_ATTEMPTS = Setting[int](
        50,
        rule=int_at_least(1),
        pinned=True,
        doc="""\
How many times one store operation (`update_store`, `take_from_store`,
`delete_store_from`) reads, computes and tries its compare-and-swap before it gives up with
`StoreContentionError`. An integer >= 1.
""",
    )

    CAS_BACKOFF_BASE = Setting[float](
        0.001,
        rule=seconds_at_least(0),
        shown="`0.001` (seconds)",
        doc="""\
The pause after the first lost compare-and-swap. Each further conflict doubles it, up to
`CAS_BACKOFF_MAX`, and every pause is jittered (a random fraction of it), so writers that
collided do not collide again in lock step. A number >= 0; `0` retries at once.
""",
    )

    CAS_BACKOFF_MAX = Setting[float](
        0.05,
        rule=seconds_at_least(0),
        shown="`0.05` (seconds)",
        doc="""\
The longest single pause between two compare-and-swap attempts. Must be >= `CAS_BACKOFF_BASE`.
""",
    )

    SNAPSHOT_CACHE_SIZE = Setting[int](
        1024,
        rule=int_at_least(0),
        shown="`1024` (stores)",
        doc="""\
How many stores each process's store client remembers the last committed row of, least
recently used first out (rows longer than 64 KiB are not kept). An update, take or delete
of a remembered store commits from that row in one round trip, without reading first; when
the row is no longer current the commit reports the current one and the write retries from
it, so results never depend on the cache. Rows are remembered only outside
`transaction.atomic` (a rollback cannot undo them). `0` turns it off: every write reads
first, two round trips.
""",
    )

    CAS_QUEUE_AFTER = Setting[int](
        20,
        rule=int_at_least(0),
        doc="""\
After this many lost compare-and-swap races, a store operation queues on the store row: on
PostgreSQL its next attempt runs in a transaction that first locks the row (writers waiting
for a row lock are served in arrival order), so that attempt cannot lose, and under heavy
contention no operation loses until `CAS_MAX_ATTEMPTS` while others commit. Its updater,
selector or claim then runs while the row is locked, the one case where it does. Set low,
every contended write ends up queued and writes take turns: with 8 writers on one store on
2 cores, 0.28x the throughput of optimistic retries at `3`, 0.70x at `10`, the same at `20`
(the default, which only catches the tail: at most 21 attempts where 0.2% took over 50).
Operations inside `transaction.atomic` never queue (the lock would outlive the attempt),
nor on SQLite (one writer at a time). `0` turns it off. An integer >= 0.
""",
    )

    MAX_STATE_BYTES = Setting[int](
        8 * MIB,
        rule=bytes_at_least(1024),
        pinned=True,
        shown="`8388608` (8 MiB)",
        doc="""\
The largest canonical encoding (sorted keys, no insignificant white space, UTF-8) of a
durable value: a store state, a step result, a selected value. A larger value raises
`WorkflowValueError` (`INVALID_STEP_VALUE`) before anything is written. An integer >= 1024.
""",
    )

    MAX_DEPTH = Setting[int](
        256,
        rule=Rule(
            lambda value: _is_int(value) and 1 <= cast(int, value) <= MAX_DEPTH_LIMIT,
            f"an integer from 1 to {MAX_DEPTH_LIMIT}",
        ),
        pinned=True,
        doc="""\
The deepest nesting of lists and dicts in a durable value; deeper values raise
`WorkflowValueError` (`INVALID_STEP_VALUE`). An integer from 1 to 512. Python's `json`
recurses once per level, and on Python 3.11 stops at the interpreter's recursion limit
(1,000 frames, the caller's included): a deeper limit would let a process with a shallow
call stack write a state that one with a deeper stack (a Celery task, a long middleware
chain) cannot read back.
""",
    )

    MAX_STATE_NODES = Setting[int](
        DEFAULT_MAX_NODES,
        rule=int_at_least(1000),
        shown="`500000` (values)",
        doc="""\
The most values a durable value may hold: every list, dict, string, number, boolean and
`null` in it counts one (a dict's keys count with their values). A value holding more
raises `WorkflowValueError` (`INVALID_STEP_VALUE`) before anything is written, and the
HTTP API refuses a request body holding more (`413`, `request_too_large`) before it
decodes it. It bounds what one write costs in time and memory as Python objects, which
`MAX_STATE_BYTES` alone does not: 8 MiB of JSON can be four million empty lists. A few
megabytes of ordinary records (about one value per 10 to 20 bytes) fit the default. An
integer >= 1000.
""",
    )

    VERSION_HISTORY_LIMIT = Setting[int | None](
        100,
        rule=optional(int_at_least(1)),
        doc="""\
How many past versions are kept per store instance for the admin's history (the oldest are
pruned as new ones commit). `None` keeps every version. An integer >= 1 or `None`. History
is for people; the protocol never reads it.
""",
    )

    VERSION_HISTORY_KEEP_STATE = Setting[bool](
        True,
        rule=BOOLEAN,
        doc="""\
Whether kept versions store the full state. `False` keeps only the changed paths, when and
by which step, which is much smaller for big stores.
""",
    )

    RELAY_DELAY = Setting[float](
        5.0,
        rule=seconds_at_least(0),
        shown="`5.0` (seconds)",
        doc="""\
How old an unacknowledged wake intent must be before the relay delivers it again. Wakes are
first handed to `WAKE_BACKEND` when the transaction commits; the relay catches those lost to
a broker outage or a process killed after the commit. A delivered wake may arrive twice:
resumes are idempotent. A number >= 0.
""",
    )

    PUBLISH_DURING_COMMIT = Setting[bool](
        True,
        rule=BOOLEAN,
        doc="""\
On PostgreSQL, a store commit made outside `transaction.atomic` hands its wakes to a
`WAKE_BACKEND` marked `enqueues_only` (the Celery one is) while the database commits it,
instead of after: a wake no longer waits for the commit's flush, and a commit that wakes
nobody costs about 0.05 ms more. A woken run that reads before the commit is visible loses
nothing; it runs once more (see
[waiters](../concepts/waiters.md#wakes-sent-during-a-commit)). Inside `transaction.atomic`
wakes always go out when the outermost transaction commits. The Celery backend counts as
enqueuing only while no receiver is connected to Celery's `before_task_publish` or
`after_task_publish` signals for its task: such a receiver may query the database, whose
connection is busy with the commit, so its wakes then go after the commit. `False` sends
them after every commit.
""",
    )

    RELAY_INTERVAL = Setting[float](
        0.5,
        rule=seconds_above(0),
        shown="`0.5` (seconds)",
        doc="""\
How long `python manage.py yieldstar_relay` sleeps between two polls for due wake intents
and timers. A number > 0.
""",
    )

    HEALTH_OVERDUE_SECONDS = Setting[float](
        60.0,
        rule=seconds_above(0),
        shown="`60.0` (seconds)",
        doc="""\
How late a wake may take effect before `python manage.py yieldstar_health` (and the admin's
banner) reports it: a durable timer (a sleep, a retry, a `take_any` timeout, a lease's
takeover) still unacknowledged this long after it was due, or an immediate wake (a store
commit's, a start's) still unacknowledged this long after it was written. Either means no
relay delivers, or no worker runs what it delivers. A number > 0; keep it well above
`RELAY_DELAY`. See [health checks](../operations/health.md).
""",
    )

    HEALTH_LEASE_GRACE_SECONDS = Setting[float](
        60.0,
        rule=seconds_above(0),
        shown="`60.0` (seconds)",
        doc="""\
How long past its lease's expiry a `running` execution with no wake intent left to resume
it is tolerated before `yieldstar_health` reports it stuck (its worker died, and its
takeover timer is gone). A number > 0. See [health checks](../operations/health.md).
""",
    )

    HEALTH_RELAY_SECONDS = Setting[float](
        60.0,
        rule=seconds_at_least(20),
        shown="`60.0` (seconds)",
        doc="""\
How long since any relay process last recorded its heartbeat (every 10 seconds while it
runs, as `yieldstar_relay` or as the beat task `relay_wakes`) before `yieldstar_health`
reports that no relay runs. A number >= 20. See [health checks](../operations/health.md).
""",
    )

    HEALTH_CACHE_SECONDS = Setting[float](
        30.0,
        rule=seconds_at_least(0),
        shown="`30.0` (seconds)",
        doc="""\
How long the admin index keeps the health report its banner shows (in Django's default
cache) before it runs the checks again; `0` checks on every view of the index. The
`yieldstar_health` command always checks afresh. A number >= 0.
""",
    )

    SCHEDULE_GRACE = Setting[float](
        60.0,
        rule=seconds_at_least(0),
        shown="`60.0` (seconds)",
        doc="""\
How late a schedule's tick may be fired and still count as on time. The relay fires ticks
in its rounds (every `RELAY_INTERVAL`); a tick due longer ago than this (no relay ran: a
deploy, an outage) is missed, and the schedule's `catch_up` decides what runs for the
missed ones: `"latest"` one execution, `"all"` one per tick, `"skip"` none (see
[schedules](../howto/schedules.md#missed-ticks)). A number >= 0.
""",
    )

    RETENTION_SECONDS = Setting[float | None](
        30 * 24 * 3600,
        rule=optional(seconds_at_least(0)),
        shown="`2592000` (30 days, in seconds)",
        doc="""\
How long after it finished (`completed`, `failed` or `cancelled`) an execution is kept.
`python manage.py yieldstar_prune` and the beat task `yieldstar_django.prune_executions`
then delete it with its heap, wake intents, waiters, claim leases and ledger rows, in small
batches; the beat task also deletes wake intents delivered as long ago (the command, those
delivered more than its `--intents-age`, 7 days by default). Unfinished executions are
never pruned, nor their ledger rows, nor a finished one while a leased claim of it is still
held. `None` keeps every execution. A number >= 0 or `None`. Stores are not pruned by it:
a definition asks for its idle stores to be deleted with its own
`define_store(..., retention=timedelta)`. See [retention](../operations/retention.md).
""",
    )

    LEASE_SECONDS = Setting[float](
        4,
        rule=seconds_above(0),
        shown="`4` (seconds)",
        doc="""\
How long a run's lease lasts unrenewed. Two resumes of one execution never run it at once;
the worker renews the lease every second (every third of this, if shorter) while the run
lasts, so a step may take longer than this. A worker that dies mid-run loses its lease
after at most this long, and the execution is resumed by another within about this plus
`RELAY_INTERVAL`. A worker that cannot renew for this long (database unreachable, process
paused) loses its lease and records nothing more. A number > 0.
""",
    )

    RUN_SLICE_SECONDS = Setting[float | None](
        2.0,
        rule=optional(seconds_above(0)),
        shown="`2.0` (seconds)",
        doc="""\
How long a resume runs an execution's steps before it gives its worker back: past this, the
run stops before its next step that is not recorded yet, lets the lease go and requests a
new run at once, which waits in the queue behind the wakes already there. No resume then
holds a pool process for a whole long run, so a lease's takeover (sent before ordinary
wakes) finds a free process within about this plus the longest step in progress, even when
every process is busy. A run always executes at least one step per resume, and replays of
recorded steps do not count. `None` runs each resume until it finishes or suspends. Runs
inside a transaction of the caller's (`yieldstar_django.testing`, a `TestCase`) are not
sliced. A number > 0 or `None`. See [reliability](../operations/reliability.md).
""",
    )

    API_REQUIRE_IF_MATCH = Setting[bool](
        False,
        rule=BOOLEAN,
        doc="""\
When `True`, the HTTP API refuses a `PUT`, `PATCH` or `DELETE` of a store without an
`If-Match` header, or `If-None-Match: *` (`428 Precondition Required`), so every write
through the API is a compare-and-swap against the version the client read, or creates a
store that does not exist. `If-Match`, `*` included, fails (`412`) on a store that does not
exist; `If-None-Match: *` on one that does.
""",
    )

    API_MAX_BODY_BYTES = Setting[int](
        None,
        rule=optional(bytes_at_least(1024)),
        shown="`None`, which means `MAX_STATE_BYTES` + 64 KiB",
        derive=_api_max_body_bytes,
        doc="""\
The largest request body the HTTP API reads. An integer >= 1024 or `None`;
`yieldstar.W002` warns when it is below `MAX_STATE_BYTES`.
""",
    )

    PUBLISH_IN_TESTS = Setting[bool](
        False,
        rule=BOOLEAN,
        doc="""\
While Django's test environment is set up (`manage.py test`, pytest-django), the default
Celery wake backend refuses to publish and raises `BrokerInTestsError`: a worker listening
on that broker (a developer's own, say) would run executions that exist only in the test
database. Tests run executions in process with `yieldstar_django.testing` (see
[Testing your workflows](../howto/testing.md)); set this to `True` only for tests that run
real Celery workers against a broker of their own.
""",
    )

    TRACING = Setting[bool | None](
        None,
        rule=optional(BOOLEAN),
        shown="`None`, which means on when `opentelemetry` is importable",
        doc="""\
OpenTelemetry spans for starts, store commits, wakes, resumes, runs and steps, made with
the application's global tracer provider; the trace context travels with an execution and
its wakes, so one trace follows a workflow from process to process. `False` turns them off;
`True` requires the `[otel]` extra (`ImproperlyConfigured` on first use without it). Off, or
with the API absent, nothing of OpenTelemetry is imported. See
[observability](../operations/observability.md).
""",
    )

    METRICS = Setting[bool | None](
        None,
        rule=optional(BOOLEAN),
        shown="`None`, which means on when `prometheus_client` is importable",
        doc="""\
Prometheus metrics named `yieldstar_*` (executions started and finished, step durations,
wake latency, outbox depth, lease takeovers, compare-and-swap retries, relay lag), in
`METRICS_REGISTRY`. `False` turns them off; off, or with `prometheus_client` absent,
nothing of it is imported; `True` requires the `[prometheus]` extra. See
[observability](../operations/observability.md).
""",
    )

    METRICS_REGISTRY = Setting[object](
        None,
        import_path=True,
        shown="`None`, which means prometheus-client's default `REGISTRY`",
        doc="""\
Dotted path of the `prometheus_client.CollectorRegistry` the metrics are registered in (an
instance may also be given directly). `None` uses the default registry, the one
`prometheus_client`'s own exposition, django-prometheus and the multiprocess collector
read.
""",
    )

    DATABASE_ALIAS = Setting[str](
        "default",
        rule=NON_EMPTY_TEXT,
        pinned=True,
        doc="""\
The database alias every part of the app uses: the store client, the runtime (executions,
their heap, leases, timers), the wake outbox and the relay, the HTTP API, the admin's
store editor and the management commands. Route all of yieldstar's models (app label
`yieldstar`) to it if you use `DATABASE_ROUTERS`: `yieldstar.E005` reports a router that
sends them elsewhere, `yieldstar.E004` an alias that is not in `DATABASES`. See
[multiple databases](../operations/database.md#multiple-databases).
""",
    )

    POOLER = Setting[str | None](
        None,
        rule=Rule(lambda value: value in POOLER_MODES, 'None, "session" or "transaction"'),
        doc="""\
How `DATABASE_ALIAS` reaches PostgreSQL: `None` (directly, or through a pooler in session
mode: `"session"` says so), or `"transaction"`, through a pooler that hands each
transaction to any server connection (PgBouncer's `pool_mode = transaction`). With
`"transaction"`, `yieldstar.E008` reports the database settings that break there
(server-side cursors on, psycopg's `prepare_threshold` set, startup `options`), and the
relay leaves frozen lease holders to PostgreSQL's `idle_in_transaction_session_timeout`,
since a server connection's pid names no worker behind such a pooler. See
[connection poolers](../operations/database.md#connection-poolers).
""",
    )

    def __init__(self, user_settings: Mapping[str, object] | None = None) -> None:
        """Use ``user_settings`` instead of Django's settings when given (for tests)."""
        self._explicit = user_settings
        self._user: Mapping[str, object] | None = None
        self._imported: dict[str, object] = {}
        #: Counts reloads: what caches derived from the settings compare against.
        self.generation = 0

    @property
    def user_settings(self) -> Mapping[str, object]:
        """The ``YIELDSTAR`` dict as configured (empty if unset)."""
        if self._user is None:
            raw: object = self._explicit
            if raw is None:
                raw = getattr(settings, SETTING_NAME, None)
            if raw is None:
                raw = {}
            if not isinstance(raw, Mapping):
                raise ImproperlyConfigured(
                    f"settings.{SETTING_NAME} must be a dict, not {type(raw).__name__}."
                )
            self._user = raw
        return self._user

    def reload(self) -> None:
        """Drop cached values; the next read sees the current Django settings."""
        self._user = None
        self._imported.clear()
        self.generation += 1

    def unknown_keys(self) -> list[str]:
        """Keys of ``YIELDSTAR`` that this version does not know, sorted."""
        return sorted(str(key) for key in self.user_settings if key not in DEFAULTS)

    def get(self, key: str) -> object:
        """The configured value of ``key``, else its default. Unknown keys raise KeyError."""
        if key not in DEFAULTS:
            raise KeyError(f"Unknown {SETTING_NAME} setting: {key!r}")
        user = self.user_settings
        return user[key] if key in user else DEFAULTS[key]

    def import_setting(self, key: str) -> object:
        """Import the dotted path stored in ``key`` (cached until reload).

        A non-string value is returned as given, so a callable may be set directly.
        Raises ``ImproperlyConfigured`` naming the setting if the import fails.
        """
        if key in self._imported:
            return self._imported[key]
        value = self.get(key)
        if isinstance(value, str):
            try:
                value = import_string(value)
            except ImportError as exc:
                raise ImproperlyConfigured(
                    f"Could not import {SETTING_NAME}[{key!r}] = {self.get(key)!r}: {exc}"
                ) from exc
        self._imported[key] = value
        return value

    @property
    def wake_backend(self) -> WakeBackend:
        """The imported wake backend callable. Raises ``ImproperlyConfigured``."""
        backend = self.import_setting("WAKE_BACKEND")
        if not callable(backend):
            raise ImproperlyConfigured(
                f"{SETTING_NAME}['WAKE_BACKEND'] = {self.get('WAKE_BACKEND')!r} is not callable."
            )
        return backend


#: Every setting, in the order of the reference page.
SETTINGS: Final[tuple[Setting[Any], ...]] = tuple(
    value for value in vars(YieldstarSettings).values() if isinstance(value, Setting)
)
#: Every accepted key and its default.
DEFAULTS: Final[Mapping[str, object]] = MappingProxyType({s.name: s.default for s in SETTINGS})
#: Keys whose value is a dotted path to import (a callable given directly is used as is).
IMPORT_STRINGS: Final = frozenset(s.name for s in SETTINGS if s.import_path)

#: The settings object every module reads.
yieldstar_settings: Final = YieldstarSettings()


def database_alias(using: str | None = None) -> str:
    """``using`` if given, else ``DATABASE_ALIAS``: the database every part of the app uses."""
    return using or yieldstar_settings.DATABASE_ALIAS


def reload_settings(*, setting: str, **kwargs: object) -> None:
    """``setting_changed`` receiver: drop the cache when ``YIELDSTAR`` changes."""
    if setting == SETTING_NAME:
        yieldstar_settings.reload()


def connect_signals() -> None:
    """Connect ``reload_settings`` to ``setting_changed`` (idempotent)."""
    setting_changed.connect(reload_settings, dispatch_uid="yieldstar_django.conf.reload")
