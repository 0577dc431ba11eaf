"""App config of the demo app."""

from __future__ import annotations

from django.apps import AppConfig


class DemoConfig(AppConfig):
    """The demo app; its ``workflows`` module is imported by yieldstar's autodiscovery."""

    name = "demo_project.demo"
    label = "demo"
    verbose_name = "yieldstar demo"
    default_auto_field = "django.db.models.BigAutoField"
