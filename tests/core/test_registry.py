"""``define_store`` registers definitions by name."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from django.core.exceptions import ImproperlyConfigured

import yieldstar_django
from yieldstar_django import StoreDefinition, define_store
from yieldstar_django.core import definition as core_definition
from yieldstar_django.core.definition import get_definition, unregister_store
from yieldstar_django.core.errors import DuplicateStoreError


def _define(name: str) -> StoreDefinition:
    return define_store(name, None, initial=lambda id: {})


def test_same_place_re_registers_and_another_place_raises() -> None:
    try:
        first = _define("registry-a")
        second = _define("registry-a")  # same line: a module re-import
        assert get_definition("registry-a") is second is not first
        with pytest.raises(DuplicateStoreError, match="already defined"):
            define_store("registry-a", None, initial=lambda id: {})
    finally:
        unregister_store("registry-a")


def test_the_exported_define_store_raises_improperly_configured() -> None:
    """The pinned contract: a name registered from another place raises ImproperlyConfigured
    (still the core's DuplicateStoreError too); the same place re-registers."""
    try:
        first = yieldstar_django.define_store("registry-b", None, initial=lambda id: {})
        with pytest.raises(ImproperlyConfigured, match="already defined") as caught:
            yieldstar_django.define_store("registry-b", None, initial=lambda id: {})
        assert isinstance(caught.value, DuplicateStoreError)
        assert get_definition("registry-b") is first
        here = __file__.removesuffix("c")
        assert core_definition._registry["registry-b"][1][0] == here  # the caller, not the wrapper
    finally:
        unregister_store("registry-b")


def test_definition_is_frozen_and_validates_its_arguments() -> None:
    d = StoreDefinition("frozen", None, lambda id: {})
    with pytest.raises(AttributeError):
        d.name = "x"  # type: ignore[misc]
    with pytest.raises(ValueError):
        StoreDefinition("", None, lambda id: {})
    with pytest.raises(TypeError):
        StoreDefinition("x", None, {})  # type: ignore[arg-type]


def test_package_imports_without_settings_or_optional_libraries() -> None:
    script = textwrap.dedent(
        """
        import sys
        for blocked in ("pydantic", "jsonschema", "rest_framework", "psycopg", "redis"):
            sys.modules[blocked] = None
        import os
        os.environ.pop("DJANGO_SETTINGS_MODULE", None)
        import yieldstar_django as y
        d = y.define_store("plain", lambda s: None, initial=lambda id: {"n": 0})
        c = y.MemoryStoreClient()
        assert c.update_store(d, "a", updater=lambda s: s.update(n=1)).version == 1
        from django.conf import settings
        assert not settings.configured
        print("ok")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
