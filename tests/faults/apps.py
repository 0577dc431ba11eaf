"""The fault suite as an app, so workers discover its workflows and record history."""

from __future__ import annotations

from django.apps import AppConfig


class FaultsConfig(AppConfig):
    name = "tests.faults"
    label = "yieldstar_faults"

    def ready(self) -> None:
        from . import history

        history.install()
        history.install_exit_after_commit()
