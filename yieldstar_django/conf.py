"""The ``YIELDSTAR`` settings dict, read through one typed object.

Use it as::

    from yieldstar_django.conf import yieldstar_settings

    yieldstar_settings.CAS_MAX_ATTEMPTS

Nothing here reads Django's settings at import time: every attribute reads
``settings.YIELDSTAR`` on first access and caches it. The cache is dropped on
Django's ``setting_changed`` signal (connected by the app's ``ready()``), so
``override_settings(YIELDSTAR=...)`` takes effect at once. Values are not
validated here; the system checks in :mod:`yieldstar_django.checks` report bad
values at startup.

Every key, its default and its meaning is listed in ``DEFAULTS`` and on the
settings reference page of the docs (a test keeps the two in sync).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, cast

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

__all__ = [
    "DEFAULTS",
    "SETTING_NAME",
    "WakeBackend",
    "YieldstarSettings",
    "connect_signals",
    "reload_settings",
    "yieldstar_settings",
]

SETTING_NAME: Final = "YIELDSTAR"

#: A wake backend: ``deliver(wakes)`` hands every wake (each has ``.execution_id``
#: and ``.workflow_id``) to something that will resume the execution. It returns once
#: they are handed over and raises otherwise; the relay retries what was not delivered.
WakeBackend = Callable[[Sequence[Any]], object]

MIB: Final = 1024 * 1024
KIB: Final = 1024

#: Every accepted key and its default. ``API_MAX_BODY_BYTES`` = ``None`` means
#: "``MAX_STATE_BYTES`` + 64 KiB", computed from the effective ``MAX_STATE_BYTES``.
DEFAULTS: Final[Mapping[str, object]] = {
    # Dotted path (or the callable itself) of ``deliver(wakes)``.
    "WAKE_BACKEND": "yieldstar_django.wakes.celery_backend",
    # Compare-and-swap attempts per operation before StoreContentionError.
    "CAS_MAX_ATTEMPTS": 50,
    # Jittered exponential backoff between CAS attempts, in seconds.
    "CAS_BACKOFF_BASE": 0.001,
    "CAS_BACKOFF_MAX": 0.05,
    # Durable-value limits: canonical encoding size and nesting depth.
    "MAX_STATE_BYTES": 8 * MIB,
    "MAX_DEPTH": 256,
    # Versions kept per store instance (None keeps all), and whether they keep state.
    "VERSION_HISTORY_LIMIT": 100,
    "VERSION_HISTORY_KEEP_STATE": True,
    # Relay: age of an unacknowledged wake intent before re-delivery, and poll interval.
    "RELAY_DELAY": 5.0,
    "RELAY_INTERVAL": 0.5,
    # Seconds after it finished before an execution (heap, ledger rows, intents) may be pruned
    # by yieldstar_prune or the prune_executions beat task; None never prunes them.
    "RETENTION_SECONDS": 30 * 24 * 3600,
    # Seconds an execution run holds its lease before another worker may take over.
    "LEASE_SECONDS": 4,
    # HTTP API: refuse writes without If-Match; request body size cap (None: derived).
    "API_REQUIRE_IF_MATCH": False,
    "API_MAX_BODY_BYTES": None,
    # Whether the Celery wake backend may publish while Django's test environment is set up.
    "PUBLISH_IN_TESTS": False,
}

#: Keys whose value is a dotted path to import (a callable given directly is used as is).
IMPORT_STRINGS: Final = frozenset({"WAKE_BACKEND"})

#: Headroom over ``MAX_STATE_BYTES`` for the default ``API_MAX_BODY_BYTES``.
API_BODY_HEADROOM: Final = 64 * KIB


class YieldstarSettings:
    """Typed, lazily read view of ``settings.YIELDSTAR`` merged over ``DEFAULTS``.

    Attribute reads never raise for a missing key (the default applies). A
    ``YIELDSTAR`` that is not a mapping raises ``ImproperlyConfigured`` on the
    first read.
    """

    def __init__(self, user_settings: Mapping[str, object] | None = None) -> None:
        """Use ``user_settings`` instead of Django's settings when given (for tests)."""
        self._explicit = user_settings
        self._user: Mapping[str, object] | None = None
        self._imported: dict[str, object] = {}

    # -- loading -----------------------------------------------------------------

    @property
    def user_settings(self) -> Mapping[str, object]:
        """The ``YIELDSTAR`` dict as configured (empty if unset)."""
        if self._user is None:
            if self._explicit is not None:
                raw: object = self._explicit
            else:
                from django.conf import settings

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

    # -- typed attributes --------------------------------------------------------
    # Each property reads through ``get``; values are whatever the user set, and
    # the system checks report values of the wrong type or range.

    @property
    def WAKE_BACKEND(self) -> str | WakeBackend:
        """Dotted path (or callable) of the wake backend ``deliver(wakes)``."""
        return cast(str | WakeBackend, self.get("WAKE_BACKEND"))

    @property
    def wake_backend(self) -> WakeBackend:
        """The imported wake backend callable. Raises ``ImproperlyConfigured``."""
        backend = self.import_setting("WAKE_BACKEND")
        if not callable(backend):
            raise ImproperlyConfigured(
                f"{SETTING_NAME}['WAKE_BACKEND'] = {self.get('WAKE_BACKEND')!r} is not callable."
            )
        return backend

    @property
    def CAS_MAX_ATTEMPTS(self) -> int:
        """Compare-and-swap attempts before ``StoreContentionError``."""
        return cast(int, self.get("CAS_MAX_ATTEMPTS"))

    @property
    def CAS_BACKOFF_BASE(self) -> float:
        """First backoff delay after a CAS conflict, in seconds (doubles, jittered)."""
        return cast(float, self.get("CAS_BACKOFF_BASE"))

    @property
    def CAS_BACKOFF_MAX(self) -> float:
        """Upper bound of one backoff delay, in seconds."""
        return cast(float, self.get("CAS_BACKOFF_MAX"))

    @property
    def MAX_STATE_BYTES(self) -> int:
        """Largest canonical encoding of a durable value, in bytes."""
        return cast(int, self.get("MAX_STATE_BYTES"))

    @property
    def MAX_DEPTH(self) -> int:
        """Deepest nesting of lists and dicts in a durable value."""
        return cast(int, self.get("MAX_DEPTH"))

    @property
    def VERSION_HISTORY_LIMIT(self) -> int | None:
        """Versions kept per store instance; ``None`` keeps every version."""
        return cast(int | None, self.get("VERSION_HISTORY_LIMIT"))

    @property
    def VERSION_HISTORY_KEEP_STATE(self) -> bool:
        """Whether kept versions store the full state (else only changed paths)."""
        return cast(bool, self.get("VERSION_HISTORY_KEEP_STATE"))

    @property
    def RELAY_DELAY(self) -> float:
        """Seconds an unacknowledged wake intent waits before the relay re-delivers it."""
        return cast(float, self.get("RELAY_DELAY"))

    @property
    def RELAY_INTERVAL(self) -> float:
        """Seconds between two relay polls."""
        return cast(float, self.get("RELAY_INTERVAL"))

    @property
    def RETENTION_SECONDS(self) -> float | None:
        """Seconds after it finished before an execution may be pruned; ``None``: never."""
        return cast(float | None, self.get("RETENTION_SECONDS"))

    @property
    def LEASE_SECONDS(self) -> float:
        """Seconds one run of an execution holds its lease."""
        return cast(float, self.get("LEASE_SECONDS"))

    @property
    def API_REQUIRE_IF_MATCH(self) -> bool:
        """Whether the HTTP API refuses writes without ``If-Match`` (``428``)."""
        return cast(bool, self.get("API_REQUIRE_IF_MATCH"))

    @property
    def API_MAX_BODY_BYTES(self) -> int:
        """Largest request body the HTTP API accepts; default ``MAX_STATE_BYTES`` + 64 KiB."""
        value = self.get("API_MAX_BODY_BYTES")
        if value is None:
            return self.MAX_STATE_BYTES + API_BODY_HEADROOM
        return cast(int, value)

    @property
    def PUBLISH_IN_TESTS(self) -> bool:
        """Whether the Celery wake backend may publish to a broker while tests run."""
        return cast(bool, self.get("PUBLISH_IN_TESTS"))


#: The settings object every module reads.
yieldstar_settings: Final = YieldstarSettings()


def reload_settings(*, setting: str, **kwargs: object) -> None:
    """``setting_changed`` receiver: drop the cache when ``YIELDSTAR`` changes."""
    if setting == SETTING_NAME:
        yieldstar_settings.reload()


def connect_signals() -> None:
    """Connect ``reload_settings`` to ``setting_changed`` (idempotent)."""
    setting_changed.connect(reload_settings, dispatch_uid="yieldstar_django.conf.reload")
