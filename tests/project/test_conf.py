"""The ``YIELDSTAR`` settings object: defaults, lazy reads, reload on override_settings."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from tests.paths import ROOT
from yieldstar_django.conf import (
    DEFAULTS,
    SETTINGS,
    YieldstarSettings,
    yieldstar_settings,
)


def deliver(wakes: Sequence[object]) -> None:
    """A wake backend that drops every wake (for these tests only)."""


def other_deliver(wakes: Sequence[object]) -> None:
    """A second backend, to see that a changed setting is re-imported."""


def test_defaults() -> None:
    assert yieldstar_settings.WAKE_BACKEND == "yieldstar_django.wakes.celery_backend"
    assert yieldstar_settings.CAS_MAX_ATTEMPTS == 50
    assert yieldstar_settings.CAS_BACKOFF_BASE == 0.001
    assert yieldstar_settings.CAS_BACKOFF_MAX == 0.05
    assert yieldstar_settings.MAX_STATE_BYTES == 8 * 1024 * 1024
    assert yieldstar_settings.MAX_DEPTH == 256
    assert yieldstar_settings.MAX_STATE_NODES == 500_000
    assert yieldstar_settings.VERSION_HISTORY_LIMIT == 100
    assert yieldstar_settings.VERSION_HISTORY_KEEP_STATE is True
    assert yieldstar_settings.RELAY_DELAY == 5.0
    assert yieldstar_settings.RELAY_INTERVAL == 0.5
    assert yieldstar_settings.SCHEDULE_GRACE == 60.0
    assert yieldstar_settings.LEASE_SECONDS == 4
    assert yieldstar_settings.API_REQUIRE_IF_MATCH is False
    assert yieldstar_settings.API_MAX_BODY_BYTES == 8 * 1024 * 1024 + 64 * 1024


def test_every_key_is_a_typed_attribute_declared_once() -> None:
    assert [s.name for s in SETTINGS] == list(DEFAULTS)
    for setting in SETTINGS:
        assert getattr(YieldstarSettings, setting.name) is setting
        assert setting.doc.strip() and setting.shown, setting.name
    assert yieldstar_settings.DATABASE_ALIAS == "default"


def test_override_settings_reloads_and_restores() -> None:
    assert yieldstar_settings.CAS_MAX_ATTEMPTS == 50
    with override_settings(YIELDSTAR={"CAS_MAX_ATTEMPTS": 3, "MAX_DEPTH": 8}):
        assert yieldstar_settings.CAS_MAX_ATTEMPTS == 3
        assert yieldstar_settings.MAX_DEPTH == 8
        assert yieldstar_settings.MAX_STATE_BYTES == 8 * 1024 * 1024
    assert yieldstar_settings.CAS_MAX_ATTEMPTS == 50
    assert yieldstar_settings.MAX_DEPTH == 256


def test_other_settings_do_not_drop_the_cache() -> None:
    before = yieldstar_settings.user_settings
    with override_settings(USE_TZ=False):
        assert yieldstar_settings.user_settings is before


def test_api_body_cap_follows_max_state_bytes() -> None:
    with override_settings(YIELDSTAR={"MAX_STATE_BYTES": 4096}):
        assert yieldstar_settings.API_MAX_BODY_BYTES == 4096 + 64 * 1024
    with override_settings(YIELDSTAR={"MAX_STATE_BYTES": 4096, "API_MAX_BODY_BYTES": 5000}):
        assert yieldstar_settings.API_MAX_BODY_BYTES == 5000


def test_version_history_limit_none_keeps_all() -> None:
    with override_settings(YIELDSTAR={"VERSION_HISTORY_LIMIT": None}):
        assert yieldstar_settings.VERSION_HISTORY_LIMIT is None


def test_wake_backend_is_imported_lazily_and_reimported_after_a_change() -> None:
    with override_settings(YIELDSTAR={"WAKE_BACKEND": "tests.project.test_conf.deliver"}):
        assert yieldstar_settings.wake_backend is deliver
    with override_settings(YIELDSTAR={"WAKE_BACKEND": "tests.project.test_conf.other_deliver"}):
        assert yieldstar_settings.wake_backend is other_deliver


def test_wake_backend_may_be_a_callable() -> None:
    with override_settings(YIELDSTAR={"WAKE_BACKEND": deliver}):
        assert yieldstar_settings.wake_backend is deliver


def test_wake_backend_that_cannot_be_imported() -> None:
    with (
        override_settings(YIELDSTAR={"WAKE_BACKEND": "tests.no_such_module.deliver"}),
        pytest.raises(ImproperlyConfigured, match="WAKE_BACKEND"),
    ):
        _ = yieldstar_settings.wake_backend


def test_wake_backend_that_is_not_callable() -> None:
    with (
        override_settings(YIELDSTAR={"WAKE_BACKEND": "tests.project.test_conf.ROOT"}),
        pytest.raises(ImproperlyConfigured, match="not callable"),
    ):
        _ = yieldstar_settings.wake_backend


def test_yieldstar_must_be_a_dict() -> None:
    with (
        override_settings(YIELDSTAR=[("CAS_MAX_ATTEMPTS", 3)]),
        pytest.raises(ImproperlyConfigured, match="must be a dict"),
    ):
        _ = yieldstar_settings.CAS_MAX_ATTEMPTS


def test_unset_yieldstar_means_defaults() -> None:
    with override_settings(YIELDSTAR=None):
        assert yieldstar_settings.CAS_MAX_ATTEMPTS == 50


def test_unknown_keys() -> None:
    with override_settings(YIELDSTAR={"CAS_MAX_ATTEMPT": 3, "MAX_DEPTH": 3}):
        assert yieldstar_settings.unknown_keys() == ["CAS_MAX_ATTEMPT"]
    with pytest.raises(KeyError):
        yieldstar_settings.get("CAS_MAX_ATTEMPT")


def test_explicit_user_settings() -> None:
    local = YieldstarSettings({"MAX_DEPTH": 5})
    assert local.MAX_DEPTH == 5
    assert local.CAS_MAX_ATTEMPTS == 50


def test_import_reads_no_settings() -> None:
    """Importing conf works without configured settings; the first read needs them."""
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    code = (
        "from django.core.exceptions import ImproperlyConfigured\n"
        "from yieldstar_django.conf import yieldstar_settings\n"
        "try:\n"
        "    yieldstar_settings.MAX_DEPTH\n"
        "except ImproperlyConfigured:\n"
        "    print('lazy')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "lazy"


def test_the_settings_page_is_the_table() -> None:
    """``docs/reference/settings.md`` holds exactly what ``scripts/settings_page.py``
    renders from ``conf.SETTINGS``: every key, default and text."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "settings_page.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    page = (ROOT / "docs" / "reference" / "settings.md").read_text()
    for setting in SETTINGS:
        assert f"## `{setting.name}`" in page, setting.name
        shown = (
            f'"{setting.default}"' if isinstance(setting.default, str) else repr(setting.default)
        )
        assert shown in setting.shown, f"{setting.name}: default {shown} not shown"
