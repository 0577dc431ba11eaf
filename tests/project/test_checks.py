"""The system checks ``yieldstar.E001`` ... ``yieldstar.E005``, ``E007``, ``W001``, ``W002``,
``W004``, ``W005``."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Sequence
from importlib.util import find_spec
from typing import Any

import pytest
from celery import Celery
from django.core import checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from yieldstar_django.celery_app import current_app
from yieldstar_django.checks import (
    check_broker_timeouts,
    check_database_alias,
    check_recovery_config,
    check_settings,
    check_sqlite_transaction_mode,
    check_wake_backend,
)

GOOD_BACKEND = "tests.project.test_checks.deliver"
NOT_CALLABLE = 42


def deliver(wakes: Sequence[object]) -> None:
    """A wake backend that drops every wake (for these tests only)."""


def ids(messages: Sequence[checks.CheckMessage]) -> list[str]:
    return [message.id or "" for message in messages]


def sqlite(**options: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"ENGINE": "django.db.backends.sqlite3", "NAME": "x.sqlite3"}
    if options:
        entry["OPTIONS"] = options
    return entry


POSTGRES = {"ENGINE": "django.db.backends.postgresql", "NAME": "x"}

overriding_databases = pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")


# -- E001 ------------------------------------------------------------------------


@overriding_databases
@pytest.mark.parametrize(
    "entry",
    [
        sqlite(),
        sqlite(transaction_mode="DEFERRED"),
        sqlite(transaction_mode=None),
        sqlite(timeout=5),
        {"ENGINE": "django.contrib.gis.db.backends.spatialite", "NAME": "x"},
    ],
)
def test_e001_sqlite_without_immediate(entry: dict[str, Any]) -> None:
    if "spatialite" in entry["ENGINE"] and find_spec("django.contrib.gis") is None:
        pytest.skip("GeoDjango is not available")
    with override_settings(DATABASES={"default": POSTGRES, "queue": entry}):
        messages = check_sqlite_transaction_mode()
    assert ids(messages) == ["yieldstar.E001"]
    assert messages[0].obj == "queue"
    assert "transaction_mode" in (messages[0].hint or "")
    assert "IMMEDIATE" in (messages[0].hint or "")


@overriding_databases
@pytest.mark.parametrize("mode", ["IMMEDIATE", "immediate", "EXCLUSIVE"])
def test_e001_passes_with_a_locking_transaction_mode(mode: str) -> None:
    with override_settings(DATABASES={"default": sqlite(transaction_mode=mode, timeout=20)}):
        assert check_sqlite_transaction_mode() == []


@overriding_databases
def test_e001_reports_every_alias_and_ignores_postgres() -> None:
    databases = {
        "default": POSTGRES,
        "a": sqlite(),
        "b": sqlite(transaction_mode="IMMEDIATE", timeout=20),
    }
    with override_settings(DATABASES=databases):
        messages = check_sqlite_transaction_mode()
    assert [(message.id, message.obj) for message in messages] == [("yieldstar.E001", "a")]


# -- W004 ------------------------------------------------------------------------


@overriding_databases
@pytest.mark.parametrize(
    "options",
    [{}, {"timeout": 5}, {"timeout": 1.5}, {"timeout": "5"}],
    ids=["missing", "5", "1.5", "text"],
)
def test_w004_sqlite_with_a_short_busy_timeout(options: dict[str, Any]) -> None:
    """Python's default busy timeout is 5 s; a burst of eight processes incrementing one
    store on one SQLite file kept single increments waiting several seconds for the write
    lock (up to 3.7 s in a 5 s burst), so 5 s is within reach of a busy moment, after
    which "database is locked" escapes as a bare ``OperationalError``."""
    entry = sqlite(transaction_mode="IMMEDIATE", **options)
    with override_settings(DATABASES={"default": POSTGRES, "queue": entry}):
        messages = check_sqlite_transaction_mode()
    assert ids(messages) == ["yieldstar.W004"]
    assert messages[0].obj == "queue"
    assert '"timeout"] = 20' in (messages[0].hint or "")


@overriding_databases
@pytest.mark.parametrize("timeout", [10, 20, 20.0, 60])
def test_w004_passes_with_a_long_enough_timeout(timeout: float) -> None:
    entry = sqlite(transaction_mode="IMMEDIATE", timeout=timeout)
    with override_settings(DATABASES={"default": entry}):
        assert check_sqlite_transaction_mode() == []


# -- E007 ------------------------------------------------------------------------


def yieldstar_check_ids() -> list[str]:
    """The ids of every registered ``yieldstar`` check's messages."""
    return ids(checks.run_checks(tags=["yieldstar"]))


@overriding_databases
@pytest.mark.parametrize("version", [(3, 31, 1), (3, 34, 1)])
def test_e007_a_sqlite_library_without_returning(
    monkeypatch: pytest.MonkeyPatch, version: tuple[int, int, int]
) -> None:
    """Django runs on SQLite 3.31 and later, but the store's statements use ``RETURNING``
    (SQLite 3.35): on an older library every store write would fail with a syntax error."""
    import sqlite3

    monkeypatch.setattr(sqlite3, "sqlite_version_info", version)
    monkeypatch.setattr(sqlite3, "sqlite_version", ".".join(map(str, version)))
    entry = sqlite(transaction_mode="IMMEDIATE", timeout=20)
    with override_settings(DATABASES={"default": POSTGRES, "queue": entry}):
        messages = [m for m in checks.run_checks(tags=["yieldstar"]) if m.id == "yieldstar.E007"]
    assert [message.obj for message in messages] == ["queue"]
    assert "3.35" in messages[0].msg and ".".join(map(str, version)) in messages[0].msg


@overriding_databases
def test_e007_passes_with_sqlite_3_35_or_no_sqlite(monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlite3

    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 35, 0))
    entry = sqlite(transaction_mode="IMMEDIATE", timeout=20)
    with override_settings(DATABASES={"default": entry}):
        assert "yieldstar.E007" not in yieldstar_check_ids()
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 31, 1))
    with override_settings(DATABASES={"default": POSTGRES}):
        assert "yieldstar.E007" not in yieldstar_check_ids()


# -- E002 ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "backend",
    ["tests.no_such_module.deliver", "tests.project.test_checks.no_such_name", "not-a-dotted-path"],
)
def test_e002_backend_cannot_be_imported(backend: str) -> None:
    with override_settings(YIELDSTAR={"WAKE_BACKEND": backend}):
        messages = check_wake_backend()
    assert ids(messages) == ["yieldstar.E002"]
    assert "WAKE_BACKEND" in (messages[0].hint or "")


@pytest.mark.parametrize("backend", ["tests.project.test_checks.NOT_CALLABLE", 42, None])
def test_e002_backend_is_not_callable(backend: object) -> None:
    with override_settings(YIELDSTAR={"WAKE_BACKEND": backend}):
        assert ids(check_wake_backend()) == ["yieldstar.E002"]


@pytest.mark.parametrize("backend", [GOOD_BACKEND, deliver])
def test_e002_passes_with_a_callable(backend: object) -> None:
    with override_settings(YIELDSTAR={"WAKE_BACKEND": backend}):
        assert check_wake_backend() == []


@pytest.mark.skipif(
    find_spec("yieldstar_django.wakes") is None, reason="yieldstar_django.wakes not written yet"
)
def test_default_wake_backend_imports() -> None:
    assert check_wake_backend() == []


# -- E003 ------------------------------------------------------------------------

INVALID = [
    ("CAS_MAX_ATTEMPTS", 0),
    ("CAS_MAX_ATTEMPTS", -1),
    ("CAS_MAX_ATTEMPTS", 2.5),
    ("CAS_MAX_ATTEMPTS", True),
    ("CAS_MAX_ATTEMPTS", "50"),
    ("CAS_BACKOFF_BASE", -0.1),
    ("CAS_BACKOFF_BASE", float("nan")),
    ("CAS_BACKOFF_MAX", float("inf")),
    ("MAX_STATE_BYTES", 1023),
    ("MAX_STATE_BYTES", None),
    ("MAX_DEPTH", 0),
    ("MAX_DEPTH", 1.0),
    ("MAX_STATE_NODES", 999),
    ("MAX_STATE_NODES", None),
    # Deeper than Python's json decodes from a deep call stack (recursion limit 1,000 on
    # 3.11): a state written from a shallow stack could not be read back in a deeper one.
    ("MAX_DEPTH", 513),
    ("MAX_DEPTH", 10_000),
    ("VERSION_HISTORY_LIMIT", 0),
    ("VERSION_HISTORY_LIMIT", "all"),
    ("VERSION_HISTORY_KEEP_STATE", 1),
    ("RELAY_DELAY", -1),
    ("RELAY_INTERVAL", 0),
    ("SCHEDULE_GRACE", -1),
    ("SCHEDULE_GRACE", "60"),
    ("LEASE_SECONDS", 0),
    ("LEASE_SECONDS", None),
    ("API_REQUIRE_IF_MATCH", "yes"),
    ("API_MAX_BODY_BYTES", 10),
    # Finite, but past what datetime arithmetic (or a thread's wait) can take: each
    # passed the checks and then raised OverflowError at run time (every commit that
    # wakes, every lease, every prune, the relay's first sleep).
    ("RELAY_DELAY", 1e12),
    ("LEASE_SECONDS", 1e12),
    ("RETENTION_SECONDS", 1e12),
    ("RELAY_INTERVAL", 1e10),
    ("CAS_BACKOFF_MAX", 1e10),
    ("SCHEDULE_GRACE", 1e12),
    # Integers past 64 bits ("no limit", written as a huge number): each passed the checks,
    # then every store commit on PostgreSQL failed ("bigint out of range") or every API
    # request with a body (OverflowError reading it).
    ("VERSION_HISTORY_LIMIT", 2**63),
    ("VERSION_HISTORY_LIMIT", 10**20),
    ("API_MAX_BODY_BYTES", 2**63),
    ("MAX_STATE_BYTES", 10**20),
    # An int past a float's range, given for a number of seconds: the check itself raised
    # OverflowError (math.isfinite), so `manage.py check` crashed instead of reporting it.
    pytest.param("RELAY_DELAY", 10**400, id="RELAY_DELAY-10**400"),
    pytest.param("RELAY_INTERVAL", 10**400, id="RELAY_INTERVAL-10**400"),
    pytest.param("LEASE_SECONDS", 10**400, id="LEASE_SECONDS-10**400"),
    pytest.param("RETENTION_SECONDS", 10**400, id="RETENTION_SECONDS-10**400"),
    pytest.param("CAS_BACKOFF_MAX", 10**400, id="CAS_BACKOFF_MAX-10**400"),
]

VALID = [
    ("CAS_MAX_ATTEMPTS", 1),
    ("CAS_BACKOFF_BASE", 0),
    ("CAS_BACKOFF_MAX", 1),
    ("MAX_STATE_BYTES", 1024),
    ("MAX_DEPTH", 1),
    ("MAX_DEPTH", 512),
    ("MAX_STATE_NODES", 1000),
    ("VERSION_HISTORY_LIMIT", None),
    ("VERSION_HISTORY_LIMIT", 1),
    ("VERSION_HISTORY_KEEP_STATE", False),
    ("RELAY_DELAY", 0),
    ("RELAY_INTERVAL", 0.1),
    ("SCHEDULE_GRACE", 0),
    ("SCHEDULE_GRACE", 3600),
    ("LEASE_SECONDS", 5),
    ("API_REQUIRE_IF_MATCH", True),
    ("API_MAX_BODY_BYTES", None),
    ("API_MAX_BODY_BYTES", 16 * 1024 * 1024),
]


@pytest.mark.parametrize(("key", "value"), INVALID)
def test_e003_invalid_value(key: str, value: object) -> None:
    with override_settings(YIELDSTAR={key: value}):
        messages = check_settings()
    assert ids(messages) == ["yieldstar.E003"]
    assert key in messages[0].msg
    assert key in (messages[0].hint or "")


@pytest.mark.parametrize(("key", "value"), VALID)
def test_e003_valid_value(key: str, value: object) -> None:
    with override_settings(YIELDSTAR={key: value}):
        assert check_settings() == []


def test_e003_backoff_max_below_base() -> None:
    with override_settings(YIELDSTAR={"CAS_BACKOFF_BASE": 0.5, "CAS_BACKOFF_MAX": 0.1}):
        messages = check_settings()
    assert ids(messages) == ["yieldstar.E003"]
    assert "CAS_BACKOFF_MAX" in messages[0].msg


def test_e003_yieldstar_is_not_a_dict() -> None:
    with override_settings(YIELDSTAR=["CAS_MAX_ATTEMPTS"]):
        assert ids(check_settings()) == ["yieldstar.E003"]


def test_defaults_pass() -> None:
    assert check_settings() == []


# -- W001, W002 --------------------------------------------------------------------


def test_w001_unknown_key_suggests_the_known_one() -> None:
    with override_settings(YIELDSTAR={"CAS_MAX_ATTEMPT": 3}):
        messages = check_settings()
    assert ids(messages) == ["yieldstar.W001"]
    assert messages[0].level == checks.WARNING
    assert "'CAS_MAX_ATTEMPTS'" in (messages[0].hint or "")


def test_w002_body_cap_below_state_cap() -> None:
    with override_settings(YIELDSTAR={"MAX_STATE_BYTES": 1 << 20, "API_MAX_BODY_BYTES": 4096}):
        assert ids(check_settings()) == ["yieldstar.W002"]


# -- registration ------------------------------------------------------------------


def test_checks_are_registered_by_the_app() -> None:
    registered = checks.registry.registry.get_checks()
    for check in (check_sqlite_transaction_mode, check_wake_backend, check_settings):
        assert check in registered


def test_manage_py_check_reports_yieldstar_errors() -> None:
    bad = {"WAKE_BACKEND": GOOD_BACKEND, "CAS_MAX_ATTEMPTS": 0}
    with override_settings(YIELDSTAR=bad), pytest.raises(SystemCheckError, match="E003"):
        call_command("check", tags=["yieldstar"])


def test_manage_py_check_passes_with_valid_settings() -> None:
    with override_settings(YIELDSTAR={"WAKE_BACKEND": GOOD_BACKEND}):
        out = io.StringIO()
        call_command("check", tags=["yieldstar"], stdout=out)
    assert "no issues" in out.getvalue()


def test_database_alias_must_be_a_configured_database() -> None:
    assert check_database_alias() == []
    with override_settings(YIELDSTAR={"DATABASE_ALIAS": "nowhere"}):
        assert ids(check_database_alias()) == ["yieldstar.E004"]
    with override_settings(YIELDSTAR={"DATABASE_ALIAS": ""}):
        assert "yieldstar.E003" in ids(check_settings())


def test_database_alias_without_a_router_that_sends_the_models_there() -> None:
    """``sqlite`` is configured, but nothing routes the app's models to it: every model is
    reported, with the alias its reads and writes would go to."""
    with override_settings(YIELDSTAR={"DATABASE_ALIAS": "sqlite"}):
        messages = check_database_alias()
    assert messages and set(ids(messages)) == {"yieldstar.E005"}
    assert any("yieldstar.Execution" in str(m.obj) for m in messages)
    assert "'default' (write)" in messages[0].msg


# -- W005: a broker publish with no socket timeout --------------------------------------------

CELERY_BACKEND = {"WAKE_BACKEND": "yieldstar_django.wakes.celery_backend"}
BOUNDED = {"socket_timeout": 2, "socket_connect_timeout": 2}
UNBOUNDED = {"visibility_timeout": 60}  # an option, but not the socket timeout


@pytest.fixture
def celery_app(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Celery]]:
    """Make a Celery app of the given configuration the current one (as a project's
    ``celery.py`` does), restoring the previous current app afterwards. Celery's
    ``CELERY_BROKER_URL`` environment variable overrides an app's broker, so it is unset."""
    monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
    monkeypatch.delenv("CELERY_BROKER_WRITE_URL", raising=False)
    previous = current_app()

    def make(broker: str | None, **conf: Any) -> Celery:
        app = Celery("project", broker=broker, set_as_current=False)
        app.conf.update(conf)
        app.set_current()
        return app

    yield make
    previous.set_current()


@pytest.mark.parametrize(
    ("broker", "conf", "warned"),
    [
        ("redis://127.0.0.1:6379/0", {}, True),
        ("rediss://cache.example:6380/0", {"broker_transport_options": {}}, True),
        ("sentinel://10.0.0.1:26379;sentinel://10.0.0.2:26379", {}, True),
        ("redis://127.0.0.1:6379/0", {"broker_transport_options": UNBOUNDED}, True),
        ("redis://127.0.0.1:6379/0", {"broker_transport_options": BOUNDED}, False),
        ("amqp://guest:guest@127.0.0.1:5672//", {}, False),
        (None, {}, False),  # Celery's default broker is RabbitMQ's amqp://
        ("memory://", {"broker_transport": "redis"}, True),  # broker_transport wins
        ("filesystem://", {}, False),
    ],
)
def test_w005_redis_broker_without_a_socket_timeout(
    celery_app: Callable[..., Celery], broker: str | None, conf: dict[str, Any], warned: bool
) -> None:
    """A Redis publish waits for the broker's reply on a socket with no timeout unless the
    transport options set one: ``tests/wakes/test_celery_config.py`` shows such a
    write hanging while the broker does not answer, and bounded with the documented
    options."""
    celery_app(broker, **conf)
    with override_settings(YIELDSTAR=CELERY_BACKEND):
        found = check_broker_timeouts()
    assert ids(found) == (["yieldstar.W005"] if warned else [])
    if warned:
        assert "socket_timeout" in (found[0].hint or "")


def test_w005_reads_the_broker_celery_uses(
    celery_app: Callable[..., Celery], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``CELERY_BROKER_URL`` in the environment overrides the app's configured broker."""
    celery_app("amqp://guest:guest@127.0.0.1:5672//")
    monkeypatch.setenv("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
    with override_settings(YIELDSTAR=CELERY_BACKEND):
        assert ids(check_broker_timeouts()) == ["yieldstar.W005"]


def test_w005_only_for_the_celery_wake_backend(celery_app: Callable[..., Celery]) -> None:
    celery_app("redis://127.0.0.1:6379/0")
    with override_settings(YIELDSTAR={"WAKE_BACKEND": GOOD_BACKEND}):
        assert check_broker_timeouts() == []
    with override_settings(YIELDSTAR=CELERY_BACKEND):
        assert ids(check_broker_timeouts()) == ["yieldstar.W005"]


def test_w005_is_registered(celery_app: Callable[..., Celery]) -> None:
    celery_app("redis://127.0.0.1:6379/0")
    with override_settings(YIELDSTAR=CELERY_BACKEND):
        out = io.StringIO()
        call_command("check", tags=["yieldstar"], stdout=out, stderr=out)
    assert "yieldstar.W005" in out.getvalue()


# -- W006: a Celery configuration that queues a takeover behind work -------------------------

RECOVERING = {"worker_prefetch_multiplier": 1, "task_queue_max_priority": 10}


@pytest.mark.parametrize(
    ("broker", "conf", "warned"),
    [
        ("redis://127.0.0.1:6379/0", {}, ["worker_prefetch_multiplier is 4"]),
        ("redis://127.0.0.1:6379/0", {"worker_prefetch_multiplier": 1}, []),
        ("amqp://guest:guest@127.0.0.1:5672//", {"worker_prefetch_multiplier": 1},
         ["task_queue_max_priority is not set"]),
        ("amqp://guest:guest@127.0.0.1:5672//", {},
         ["worker_prefetch_multiplier is 4", "task_queue_max_priority is not set"]),
        ("amqp://guest:guest@127.0.0.1:5672//", RECOVERING, []),
        (None, {"worker_prefetch_multiplier": 1}, ["task_queue_max_priority"]),  # amqp://
        ("sentinel://10.0.0.1:26379", {"worker_prefetch_multiplier": 2},
         ["worker_prefetch_multiplier is 2"]),
        ("memory://", {"worker_prefetch_multiplier": 1}, []),
    ],
)  # fmt: skip
def test_w006_a_configuration_that_queues_takeovers_behind_work(
    celery_app: Callable[..., Celery], broker: str | None, conf: dict[str, Any], warned: list[str]
) -> None:
    """Prefetching (Celery's default multiplier is 4) reserves messages behind busy pool
    processes; RabbitMQ ignores priorities on a queue declared without them. Either keeps
    a takeover waiting behind work (``tests/faults/test_saturated_recovery.py``)."""
    celery_app(broker, **conf)
    with override_settings(YIELDSTAR=CELERY_BACKEND):
        found = check_recovery_config()
    assert ids(found) == (["yieldstar.W006"] if warned else [])
    for text in warned:
        assert text in found[0].msg


def test_w006_only_for_the_celery_wake_backend(celery_app: Callable[..., Celery]) -> None:
    celery_app("redis://127.0.0.1:6379/0")
    with override_settings(YIELDSTAR={"WAKE_BACKEND": GOOD_BACKEND}):
        assert check_recovery_config() == []
    with override_settings(YIELDSTAR=CELERY_BACKEND):
        out = io.StringIO()
        call_command("check", tags=["yieldstar"], stdout=out, stderr=out)
    assert "yieldstar.W006" in out.getvalue()
