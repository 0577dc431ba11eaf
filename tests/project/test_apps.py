"""The app config: label, checks registered in ready(), workflows autodiscovery."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from django.apps import apps
from django.test import override_settings

from yieldstar_django.apps import YieldstarConfig, autodiscover

DISCOVERED = "tests.project.discovery_app.workflows"


@pytest.fixture
def forget_discovered() -> Iterator[None]:
    sys.modules.pop(DISCOVERED, None)
    yield
    sys.modules.pop(DISCOVERED, None)


def test_app_config() -> None:
    config = apps.get_app_config("yieldstar")
    assert isinstance(config, YieldstarConfig)
    assert config.name == "yieldstar_django"
    assert config.verbose_name == "Yieldstar"
    assert config.default_auto_field == "django.db.models.BigAutoField"


@pytest.mark.usefixtures("forget_discovered")
def test_autodiscover_imports_workflows_modules_of_installed_apps() -> None:
    with override_settings(INSTALLED_APPS=["yieldstar_django", "tests.project.discovery_app"]):
        autodiscover()
        assert DISCOVERED in sys.modules


@pytest.mark.usefixtures("forget_discovered")
def test_ready_runs_autodiscovery() -> None:
    """Re-populating the registry (as at startup) imports the workflows modules."""
    installed = [
        "django.contrib.auth",
        "django.contrib.contenttypes",
        "yieldstar_django",
        "tests.project.discovery_app",
    ]
    with override_settings(INSTALLED_APPS=installed):
        assert DISCOVERED in sys.modules


@pytest.mark.usefixtures("forget_discovered")
def test_autodiscover_skips_apps_without_workflows() -> None:
    autodiscover()
    assert DISCOVERED not in sys.modules
