"""Django system checks for yieldstar's settings (``python manage.py check``).

| id | what |
| --- | --- |
| ``yieldstar.E001`` | a SQLite database without ``OPTIONS["transaction_mode"] = "IMMEDIATE"`` |
| ``yieldstar.E002`` | ``YIELDSTAR["WAKE_BACKEND"]`` cannot be imported or is not callable |
| ``yieldstar.E003`` | a ``YIELDSTAR`` value of the wrong type or out of range |
| ``yieldstar.W001`` | an unknown ``YIELDSTAR`` key (a typo is silently ignored otherwise) |
| ``yieldstar.W002`` | ``API_MAX_BODY_BYTES`` below ``MAX_STATE_BYTES`` |
| ``yieldstar.E004`` | ``DATABASE_ALIAS`` is not a database of ``DATABASES`` |
| ``yieldstar.E005`` | ``DATABASE_ROUTERS`` send a yieldstar model off ``DATABASE_ALIAS`` |
| ``yieldstar.E006`` | PostgreSQL with ``OPTIONS["isolation_level"]`` above READ COMMITTED |
| ``yieldstar.E007`` | a SQLite database on a SQLite library older than 3.35 (no ``RETURNING``) |
| ``yieldstar.W003`` | the Celery wake backend with no Celery app created (see ``celery_app``) |
| ``yieldstar.W004`` | a SQLite database whose ``OPTIONS["timeout"]`` is missing or under 10 s |
| ``yieldstar.W005`` | the Celery wake backend on a Redis broker with no ``socket_timeout`` |
| ``yieldstar.W006`` | Celery prefetch above 1, or RabbitMQ queues without priorities |
| ``yieldstar.E008`` | ``POOLER = "transaction"`` with a database setting that breaks there |
| ``yieldstar.W007`` | no ``POOLER`` for a database on PgBouncer's port (6432) |

The checks only read settings (and E007 the SQLite library's version); none connects to
a database. They are
registered by :meth:`yieldstar_django.apps.YieldstarConfig.ready`.
"""

from __future__ import annotations

import difflib
import functools
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from django.apps import AppConfig, apps
from django.conf import settings
from django.core import checks
from django.core.checks import CheckMessage
from django.core.exceptions import ImproperlyConfigured
from django.db import router
from django.db.utils import load_backend

from .celery_app import HINT, broker_kind, broker_transport, current_app, is_default_app
from .conf import DEFAULTS, SETTING_NAME, SETTINGS, yieldstar_settings
from .wakes.backends import celery_backend

__all__ = [
    "check_broker_timeouts",
    "check_celery_app",
    "check_database_alias",
    "check_postgres_isolation_level",
    "check_settings",
    "check_sqlite_transaction_mode",
    "check_sqlite_version",
    "check_transaction_pooler",
    "check_wake_backend",
    "register",
]

TAG = "yieldstar"

#: SQLite transaction modes that take the write lock when the transaction begins.
SQLITE_LOCKING_MODES = frozenset({"IMMEDIATE", "EXCLUSIVE"})

#: The shortest SQLite busy timeout (seconds) without ``yieldstar.W004``, and Python's
#: default, which applies when ``OPTIONS`` sets none.
SQLITE_MIN_TIMEOUT = 10.0
SQLITE_DEFAULT_TIMEOUT = 5.0

#: The oldest SQLite library the store's statements run on: ``RETURNING`` is 3.35's
#: (Django itself accepts 3.31).
SQLITE_MIN_VERSION = (3, 35, 0)

#: Kombu transports whose publish waits for the broker's reply on a socket that has no
#: timeout unless ``broker_transport_options`` sets ``socket_timeout``.
UNBOUNDED_TRANSPORTS = frozenset({"redis", "rediss", "sentinel"})


def system_check(
    find: Callable[[], Iterator[CheckMessage]],
) -> Callable[..., list[CheckMessage]]:
    """A Django system check (``check(app_configs=None, **kwargs)``, the messages as a list)
    made of ``find``, which yields them. Named and documented as ``find``, but without
    ``__wrapped__``: Django reads the check's own signature (it must take ``**kwargs``)."""

    def check(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[CheckMessage]:
        return list(find())

    functools.update_wrapper(check, find, ("__module__", "__name__", "__qualname__", "__doc__"), ())
    del check.__wrapped__  # type: ignore[attr-defined]
    return check


def _setting_error(key: str, value: object, expected: str) -> checks.Error:
    return checks.Error(
        f"{SETTING_NAME}[{key!r}] = {value!r} is invalid: it must be {expected}.",
        hint=(
            f"Set {SETTING_NAME}[{key!r}] to {expected}, or remove the key to use the "
            f"default ({DEFAULTS[key]!r})."
        ),
        id="yieldstar.E003",
    )


@system_check
def check_settings() -> Iterator[CheckMessage]:
    """E003 for invalid values, W001 for unknown keys, W002 for a body cap below the state cap."""
    try:
        user = yieldstar_settings.user_settings
    except ImproperlyConfigured as exc:
        yield checks.Error(
            str(exc),
            hint=f"Set settings.{SETTING_NAME} to a dict such as {{'CAS_MAX_ATTEMPTS': 50}}.",
            id="yieldstar.E003",
        )
        return

    invalid: set[str] = set()
    for setting in SETTINGS:
        key, rule = setting.name, setting.rule
        if rule is not None and key in user and not rule.accepts(user[key]):
            yield _setting_error(key, user[key], rule.expected)
            invalid.add(key)

    if not invalid & {"CAS_BACKOFF_BASE", "CAS_BACKOFF_MAX"}:
        base, cap = yieldstar_settings.CAS_BACKOFF_BASE, yieldstar_settings.CAS_BACKOFF_MAX
        if cap < base:
            yield checks.Error(
                f"{SETTING_NAME}['CAS_BACKOFF_MAX'] = {cap!r} is below "
                f"{SETTING_NAME}['CAS_BACKOFF_BASE'] = {base!r}.",
                hint="Make CAS_BACKOFF_MAX greater than or equal to CAS_BACKOFF_BASE.",
                id="yieldstar.E003",
            )

    if not invalid & {"MAX_STATE_BYTES", "API_MAX_BODY_BYTES"}:
        body, state = yieldstar_settings.API_MAX_BODY_BYTES, yieldstar_settings.MAX_STATE_BYTES
        if body < state:
            yield checks.Warning(
                f"{SETTING_NAME}['API_MAX_BODY_BYTES'] = {body} is below "
                f"MAX_STATE_BYTES = {state}: the HTTP API will refuse states that "
                "the store accepts.",
                hint="Remove API_MAX_BODY_BYTES (it then follows MAX_STATE_BYTES) "
                "or raise it above MAX_STATE_BYTES.",
                id="yieldstar.W002",
            )

    for key in yieldstar_settings.unknown_keys():
        close = difflib.get_close_matches(key, list(DEFAULTS), n=1)
        suggestion = f" Did you mean {close[0]!r}?" if close else ""
        yield checks.Warning(
            f"Unknown setting {SETTING_NAME}[{key!r}]: it is ignored.",
            hint=f"Remove it or fix its name.{suggestion} "
            f"Known keys: {', '.join(sorted(DEFAULTS))}.",
            id="yieldstar.W001",
        )


@system_check
def check_wake_backend() -> Iterator[CheckMessage]:
    """E002 if ``WAKE_BACKEND`` cannot be imported or is not callable."""
    try:
        configured = yieldstar_settings.get("WAKE_BACKEND")
        backend = yieldstar_settings.import_setting("WAKE_BACKEND")
    except ImproperlyConfigured as exc:
        problem = str(exc)
    else:
        if callable(backend):
            return
        problem = f"{SETTING_NAME}['WAKE_BACKEND'] = {configured!r} is not callable."
    if configured == DEFAULTS["WAKE_BACKEND"]:
        hint = (
            "The default backend needs yieldstar_django.wakes and Celery: reinstall "
            "yieldstar-django, or set "
            f"{SETTING_NAME}['WAKE_BACKEND'] to the dotted path of a callable deliver(wakes)."
        )
    else:
        hint = (
            f"Set {SETTING_NAME}['WAKE_BACKEND'] to the dotted path of a callable "
            f"deliver(wakes), or remove it to use the default ({DEFAULTS['WAKE_BACKEND']!r})."
        )
    yield checks.Error(problem, hint=hint, id="yieldstar.E002")


def _vendor(engine: str) -> str | None:
    """The vendor of the backend ``engine`` (``"sqlite"`` for SpatiaLite, ``"postgresql"``
    for PostGIS), ``None`` when it cannot be loaded (Django reports a broken ENGINE or a
    missing driver itself)."""
    try:
        return getattr(load_backend(engine).DatabaseWrapper, "vendor", None)
    except Exception:
        return None


def _is_sqlite(engine: str) -> bool:
    """Whether the backend ``engine`` is SQLite (one that cannot be loaded, by its name)."""
    vendor = _vendor(engine)
    if vendor is None:
        return "sqlite" in engine or "spatialite" in engine
    return vendor == "sqlite"


@system_check
def check_sqlite_transaction_mode() -> Iterator[CheckMessage]:
    """E001 for each SQLite database whose transactions do not take the write lock at BEGIN,
    W004 for one that does but waits for it less than ``SQLITE_MIN_TIMEOUT`` seconds.

    yieldstar reads a store and then writes it in one transaction. SQLite's default
    ``DEFERRED`` transactions take the write lock only at the first write, so two such
    transactions deadlock and one fails with "database is locked" at once, without
    waiting for the busy timeout. ``IMMEDIATE`` (or ``EXCLUSIVE``) avoids that.

    Writers then queue for the lock, polled by SQLite's busy handler, which is not fair:
    in a burst of eight processes incrementing one store, single increments waited for it
    several seconds (up to 3.7 s in a 5 s burst), close to Python's default timeout of 5 s,
    past which "database is locked" escapes as an ``OperationalError``.
    """
    databases: Mapping[str, Mapping[str, Any]] = getattr(settings, "DATABASES", {})
    for alias, config in databases.items():
        engine = str(config.get("ENGINE", ""))
        if not engine or not _is_sqlite(engine):
            continue
        options = config.get("OPTIONS") or {}
        mode = options.get("transaction_mode")
        if isinstance(mode, str) and mode.upper() in SQLITE_LOCKING_MODES:
            yield from _short_sqlite_timeout(alias, options.get("timeout"))
            continue
        yield checks.Error(
            f"SQLite database {alias!r} uses transaction_mode={mode!r}: concurrent "
            "store updates fail with 'database is locked'.",
            hint=(
                f'Set DATABASES[{alias!r}]["OPTIONS"]["transaction_mode"] = "IMMEDIATE" '
                "(Django 5.1+), or use PostgreSQL."
            ),
            obj=alias,
            id="yieldstar.E001",
        )


@system_check
def check_sqlite_version() -> Iterator[CheckMessage]:
    """E007 for each SQLite database when Python's SQLite library is older than
    ``SQLITE_MIN_VERSION``: the store's statements use ``RETURNING`` (SQLite 3.35), and
    every store write would fail there with a syntax error. Django runs on 3.31 and later."""
    if sqlite3.sqlite_version_info >= SQLITE_MIN_VERSION:
        return
    databases: Mapping[str, Mapping[str, Any]] = getattr(settings, "DATABASES", {})
    for alias, config in databases.items():
        engine = str(config.get("ENGINE", ""))
        if not engine or not _is_sqlite(engine):
            continue
        yield checks.Error(
            f"SQLite database {alias!r} runs on SQLite {sqlite3.sqlite_version}: yieldstar "
            "needs SQLite 3.35 or later (RETURNING); every store write would fail.",
            hint=(
                "Use a Python linked to SQLite 3.35 or later (python -c 'import sqlite3; "
                "print(sqlite3.sqlite_version)'), or PostgreSQL."
            ),
            obj=alias,
            id="yieldstar.E007",
        )


def _short_sqlite_timeout(alias: str, timeout: Any) -> Iterator[CheckMessage]:
    """W004 if the busy ``timeout`` of SQLite database ``alias`` is under 10 s."""
    try:
        seconds = SQLITE_DEFAULT_TIMEOUT if timeout is None else float(timeout)
    except (TypeError, ValueError):
        seconds = 0.0
    if seconds >= SQLITE_MIN_TIMEOUT:
        return
    shown = "Python's default of 5 s" if timeout is None else f"timeout={timeout!r}"
    yield checks.Warning(
        f"SQLite database {alias!r} waits for the write lock {shown}: in a burst of "
        "writers, a store update may fail with 'database is locked'.",
        hint=f'Set DATABASES[{alias!r}]["OPTIONS"]["timeout"] = 20 (seconds).',
        obj=alias,
        id="yieldstar.W004",
    )


@system_check
def check_postgres_isolation_level() -> Iterator[CheckMessage]:
    """E006 if ``DATABASE_ALIAS`` is a PostgreSQL database whose
    ``OPTIONS["isolation_level"]`` is REPEATABLE READ or SERIALIZABLE (other databases,
    which yieldstar does not use, may run at any level).

    A commit locks its store row, then looks up the ledger and the waiters; they must see
    what committed while it waited for the lock. Django runs every transaction it opens
    (``transaction.atomic``, which every workflow step's commit uses) at that level; at
    REPEATABLE READ the lookup reads the snapshot taken before the wait and misses a waiter
    registered meanwhile, a lost wake (SERIALIZABLE aborts one of them instead).
    READ UNCOMMITTED is READ COMMITTED on PostgreSQL.
    """
    databases: Mapping[str, Mapping[str, Any]] = getattr(settings, "DATABASES", {})
    alias = yieldstar_settings.get("DATABASE_ALIAS")
    config = databases.get(alias) if isinstance(alias, str) else None
    if config is None:
        return  # E004 reports it
    engine = str(config.get("ENGINE", ""))
    level = (config.get("OPTIONS") or {}).get("isolation_level")
    if level is None or not engine or _vendor(engine) != "postgresql":
        return
    try:
        from django.db.backends.postgresql.psycopg_any import IsolationLevel

        named = IsolationLevel(level)
    except Exception:  # no driver, or a value Django refuses itself on connect
        return
    if named in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED):
        return
    yield checks.Error(
        f"PostgreSQL database {alias!r} uses isolation_level={named.name}: a store "
        "commit must run at READ COMMITTED, or it can miss the waiters registered "
        "while it waited for the store's row lock (a lost wake).",
        hint=(
            f'Remove DATABASES[{alias!r}]["OPTIONS"]["isolation_level"] (PostgreSQL\'s '
            "default is READ COMMITTED), or set it to IsolationLevel.READ_COMMITTED."
        ),
        obj=alias,
        id="yieldstar.E006",
    )


#: PgBouncer's default port: a database there without ``POOLER`` gets ``yieldstar.W007``.
PGBOUNCER_PORT = "6432"


@system_check
def check_transaction_pooler() -> Iterator[CheckMessage]:
    """E008 for each setting of the PostgreSQL database of ``DATABASE_ALIAS`` that breaks
    behind a transaction pooler when ``POOLER`` is ``"transaction"``; W007 when ``POOLER``
    is unset and that database is on PgBouncer's default port.

    Behind a transaction pooler, consecutive transactions of one Django connection run on
    any of the pooler's server connections, so nothing may outlive a transaction on the
    server: a ``WITH HOLD`` cursor (Django's server-side cursors, which ``.iterator()`` uses
    in autocommit: the admin's bulk actions), a prepared statement (psycopg prepares a
    statement run ``prepare_threshold`` times, and looks for it later on whatever server
    connection it gets; PgBouncer 1.21 and later can track them, with
    ``max_prepared_statements`` set), and a startup ``options`` parameter (PgBouncer
    refuses it unless ``ignore_startup_parameters`` lists it; it would then be lost).
    """
    databases: Mapping[str, Mapping[str, Any]] = getattr(settings, "DATABASES", {})
    alias = yieldstar_settings.get("DATABASE_ALIAS")
    config = databases.get(alias) if isinstance(alias, str) else None
    if config is None:
        return  # E004 reports it
    engine = str(config.get("ENGINE", ""))
    if not engine or _vendor(engine) != "postgresql":
        return
    pooler = yieldstar_settings.get("POOLER")
    if pooler is None and str(config.get("PORT", "")) == PGBOUNCER_PORT:
        yield checks.Warning(
            f"PostgreSQL database {alias!r} is on port {PGBOUNCER_PORT}, PgBouncer's, but "
            f"{SETTING_NAME}['POOLER'] is not set: the settings that break behind a "
            "transaction pooler are not checked.",
            hint=(
                f'Set {SETTING_NAME}["POOLER"] = "transaction" if it pools transactions '
                '(PgBouncer\'s pool_mode = transaction), "session" otherwise '
                "(docs/operations/database.md#connection-poolers)."
            ),
            obj=alias,
            id="yieldstar.W007",
        )
        return
    if pooler != "transaction":
        return
    options: Mapping[str, Any] = config.get("OPTIONS") or {}
    breaking: list[tuple[str, str]] = []
    if not config.get("DISABLE_SERVER_SIDE_CURSORS", False):
        breaking.append(
            (
                "server-side cursors are on: a QuerySet.iterator() outside a transaction "
                "declares a WITH HOLD cursor on one server connection and fetches from "
                "another (cursor does not exist)",
                f'Set DATABASES[{alias!r}]["DISABLE_SERVER_SIDE_CURSORS"] = True.',
            )
        )
    if options.get("prepare_threshold") is not None:
        breaking.append(
            (
                f"OPTIONS['prepare_threshold'] = {options['prepare_threshold']!r}: psycopg "
                "prepares a statement on one server connection and runs it on another "
                "(prepared statement does not exist)",
                f'Remove DATABASES[{alias!r}]["OPTIONS"]["prepare_threshold"] (Django '
                "leaves it None), unless the pooler is PgBouncer 1.21 or later with "
                'max_prepared_statements set (then set POOLER to "session" to silence '
                "this check).",
            )
        )
    if options.get("options"):
        breaking.append(
            (
                f"OPTIONS['options'] = {options['options']!r}: a startup parameter that "
                "PgBouncer refuses (unsupported startup parameter) and a transaction "
                "pooler would not apply to the server connections it hands out",
                f'Remove DATABASES[{alias!r}]["OPTIONS"]["options"] and set those '
                "parameters with ALTER ROLE ... SET or ALTER DATABASE ... SET.",
            )
        )
    for problem, hint in breaking:
        yield checks.Error(
            f"PostgreSQL database {alias!r} is behind a transaction pooler "
            f"({SETTING_NAME}['POOLER'] = 'transaction') and {problem}.",
            hint=hint,
            obj=alias,
            id="yieldstar.E008",
        )


@system_check
def check_database_alias() -> Iterator[CheckMessage]:
    """E004 if ``DATABASE_ALIAS`` is not in ``DATABASES``; E005 for each of yieldstar's
    models that ``DATABASE_ROUTERS`` read, write or migrate elsewhere."""
    alias = yieldstar_settings.get("DATABASE_ALIAS")
    databases: Mapping[str, Any] = getattr(settings, "DATABASES", {})
    if not isinstance(alias, str) or alias not in databases:
        yield checks.Error(
            f"{SETTING_NAME}['DATABASE_ALIAS'] = {alias!r} is not a database of DATABASES.",
            hint=f"Use one of {', '.join(sorted(databases))}, or remove the key ('default').",
            id="yieldstar.E004",
        )
        return
    for model in apps.get_app_config("yieldstar").get_models():
        label = model._meta.label
        read, write = router.db_for_read(model), router.db_for_write(model)
        migrate = router.allow_migrate_model(alias, model)
        if read == alias and write == alias and migrate:
            continue
        yield checks.Error(
            f"DATABASE_ROUTERS send {label} to {read!r} (read) and {write!r} (write)"
            f"{'' if migrate else ', and do not migrate it there'}, but "
            f"{SETTING_NAME}['DATABASE_ALIAS'] is {alias!r}: a step row and its store "
            "commit would not share a transaction.",
            hint=f"Route every model of the app label 'yieldstar' to {alias!r} (reads, "
            f"writes and migrations), or set {SETTING_NAME}['DATABASE_ALIAS'] to where "
            "your router sends them.",
            obj=label,
            id="yieldstar.E005",
        )


@system_check
def check_celery_app() -> Iterator[CheckMessage]:
    """W003 when the Celery wake backend is configured but no Celery app was created once
    Django is set up (the project's package did not import it)."""
    try:
        backend = yieldstar_settings.import_setting("WAKE_BACKEND")
    except Exception:  # E002 reports it
        return
    if backend is not celery_backend or not is_default_app(current_app()):
        return
    yield checks.Warning(
        "WAKE_BACKEND is the Celery backend, but no Celery app was created: wakes "
        "would be refused (and retried by the relay) until one is.",
        hint=HINT,
        id="yieldstar.W003",
    )


@system_check
def check_broker_timeouts() -> Iterator[CheckMessage]:
    """W005 when the Celery wake backend publishes through a Redis broker whose socket has
    no timeout: a broker that stops answering then blocks every write that wakes a waiter,
    and the request that made it, for ever."""
    try:
        backend = yieldstar_settings.import_setting("WAKE_BACKEND")
    except Exception:  # E002 reports it
        return
    app = current_app()
    if backend is not celery_backend or is_default_app(app):  # W003 covers the default app
        return
    try:
        transport = broker_transport(app)
        options = dict(app.conf.broker_transport_options or {})
    except Exception:  # a Celery configuration that does not load is Celery's to report
        return
    if transport not in UNBOUNDED_TRANSPORTS or options.get("socket_timeout") is not None:
        return
    yield checks.Warning(
        f"WAKE_BACKEND publishes wakes through a {transport} broker with no socket "
        "timeout: if the broker stops answering (a hung server, a failover, a dropped "
        "idle connection), every write that wakes a waiter waits for it for ever.",
        hint='Set CELERY_BROKER_TRANSPORT_OPTIONS = {"socket_timeout": 2, '
        '"socket_connect_timeout": 2} (docs/howto/run-workers.md): such a write then '
        "gives up in seconds and the relay delivers its wake once the broker is back.",
        id="yieldstar.W005",
    )


@system_check
def check_recovery_config() -> Iterator[CheckMessage]:
    """W006 when the Celery configuration lets a lease's takeover wait behind the queue:
    workers that prefetch more than one message per pool process
    (``worker_prefetch_multiplier`` above 1, Celery's default 4), where a takeover waits
    behind the messages a busy worker reserved; or a RabbitMQ broker whose queues are
    declared without priorities (``task_queue_max_priority`` unset), where the takeover's
    priority is ignored and it waits behind every wake already queued."""
    try:
        backend = yieldstar_settings.import_setting("WAKE_BACKEND")
    except Exception:  # E002 reports it
        return
    app = current_app()
    if backend is not celery_backend or is_default_app(app):  # W003 covers the default app
        return
    try:
        prefetch = app.conf.worker_prefetch_multiplier
        max_priority = app.conf.task_queue_max_priority
        kind = broker_kind(app)
    except Exception:  # a Celery configuration that does not load is Celery's to report
        return
    problems = []
    if prefetch != 1:
        problems.append(
            f"worker_prefetch_multiplier is {prefetch!r}: a busy worker reserves that many "
            "messages per pool process, and a takeover among them waits until the runs "
            "before it end"
        )
    if kind == "amqp" and not max_priority:
        problems.append(
            "task_queue_max_priority is not set: RabbitMQ declares the queues without "
            "priorities, so a takeover waits behind every wake queued before it"
        )
    if not problems:
        return
    yield checks.Warning(
        "A worker that dies while every pool process is busy would be taken over late: "
        + "; ".join(problems)
        + ".",
        hint="Set CELERY_WORKER_PREFETCH_MULTIPLIER = 1 and, on RabbitMQ, "
        "CELERY_TASK_QUEUE_MAX_PRIORITY = 10 (a queue that exists already keeps its "
        "arguments: declare a new one) (docs/operations/reliability.md).",
        id="yieldstar.W006",
    )


def register() -> None:
    """Register every check under the ``yieldstar`` tag (idempotent)."""
    for check in (
        check_sqlite_transaction_mode,
        check_sqlite_version,
        check_postgres_isolation_level,
        check_wake_backend,
        check_settings,
        check_database_alias,
        check_celery_app,
        check_broker_timeouts,
        check_recovery_config,
        check_transaction_pooler,
    ):
        checks.register(check, TAG)
