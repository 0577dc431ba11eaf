"""``natural_key``: the one unique constraint each model declares, its natural key."""

from __future__ import annotations

from django.db import models

__all__: list[str] = []  # used by the model modules, not exported with the models


def natural_key(name: str, *fields: str) -> list[models.BaseConstraint]:
    """``Meta.constraints`` holding one ``UniqueConstraint`` named ``name`` over ``fields``."""
    return [models.UniqueConstraint(fields=list(fields), name=name)]
