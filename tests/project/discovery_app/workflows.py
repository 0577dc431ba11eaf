"""Imported by ``yieldstar_django.apps.autodiscover``; records that it was."""

from __future__ import annotations

IMPORTED = True
