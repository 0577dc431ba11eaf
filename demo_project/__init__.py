"""A minimal Django project that runs yieldstar_django end to end.

The Celery app is imported here so that ``@shared_task`` binds to it.
"""

from __future__ import annotations

from .celery import app as celery_app

__all__ = ("celery_app",)
