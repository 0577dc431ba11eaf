"""Routers of the two-database tests."""

from __future__ import annotations

from typing import Any

APP_LABEL = "yieldstar"


class YieldstarRouter:
    """Every model of the app label ``yieldstar`` on the ``yieldstar`` alias, and only
    there; everything else on ``default`` (the suite's own models migrated on both)."""

    alias = "yieldstar"

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return self.alias if model._meta.app_label == APP_LABEL else None

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        return self.alias if model._meta.app_label == APP_LABEL else None

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        return None

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        if app_label == APP_LABEL:
            return db == self.alias
        if app_label == "yieldstar_tests":
            return None  # the suite's own models, on both: a project's table may be either
        return db != self.alias


class ElsewhereRouter(YieldstarRouter):
    """Sends the app's models to ``default``: disagrees with ``DATABASE_ALIAS``."""

    alias = "default"
