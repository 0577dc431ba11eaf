"""The Django app config: system checks, settings reload, workflow and schedule discovery."""

from __future__ import annotations

from importlib import import_module
from importlib.util import find_spec

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules

from . import schema_adapters  # noqa: F401  (the Django schema kinds, before any models module)

#: Modules of this app imported in ``ready()`` when they exist, for their side effects
#: (registering Celery tasks, signal receivers).
OPTIONAL_MODULES = ("yieldstar_django.tasks", "yieldstar_django.signals")


def autodiscover() -> None:
    """Import the ``workflows`` and ``schedules`` modules of every installed app that has
    them.

    This is how every process (web, Celery worker, relay) knows every
    ``@workflow``, as the admin does with ``admin`` modules. An error raised while
    importing a ``workflows`` module propagates.
    """
    autodiscover_modules("workflows", "schedules")


def _module_exists(name: str) -> bool:
    try:
        return find_spec(name) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


class YieldstarConfig(AppConfig):
    """``INSTALLED_APPS`` entry ``"yieldstar_django"`` (label ``yieldstar``)."""

    name = "yieldstar_django"
    label = "yieldstar"
    verbose_name = "Yieldstar"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Register checks, connect the settings reload, register the relay's upkeep, import
        tasks and workflows."""
        from . import checks, conf
        from .analyze import analyze_grown_tables
        from .runtime.claim_leases import expire_for_relay
        from .runtime.leases import reap_frozen_holders
        from .runtime.schedules import fire_due_schedules
        from .wakes.relay import every_round

        checks.register()
        conf.connect_signals()
        every_round(expire_for_relay)
        every_round(reap_frozen_holders)
        every_round(analyze_grown_tables)
        every_round(fire_due_schedules)
        for module in OPTIONAL_MODULES:
            if _module_exists(module):
                import_module(module)
        autodiscover()
