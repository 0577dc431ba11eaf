"""The two-database tests run only under ``tests.settings_router`` (``tests/project/test_router.py``
starts them in a subprocess with ``--ds=tests.settings_router``)."""

from __future__ import annotations

from django.conf import settings

collect_ignore_glob = [] if "yieldstar" in settings.DATABASES else ["test_*.py"]
