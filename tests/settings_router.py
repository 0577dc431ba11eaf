"""Test settings with yieldstar on a second PostgreSQL database, routed there
(``tests/project/router``): ``DATABASE_ALIAS = "yieldstar"`` and a router that sends every model
of the app label ``yieldstar`` to it. The ``default`` database keeps Django's own apps."""

from __future__ import annotations

from typing import Any

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES, YIELDSTAR

ROUTED_ALIAS = "yieldstar"
_NAME = DATABASES["default"]["NAME"]

# Test databases of their own: this settings module runs in a subprocess of the main
# suite (tests/project/test_router.py), whose test databases it must neither reuse nor drop.
DATABASES["default"] = {**DATABASES["default"], "TEST": {"NAME": f"test_{_NAME}_router_default"}}
DATABASES[ROUTED_ALIAS] = {
    **DATABASES["default"],
    "NAME": f"{_NAME}_routed",
    "TEST": {"NAME": f"test_{_NAME}_routed"},
}
DATABASES["sqlite"] = {
    **DATABASES["sqlite"],
    "TEST": {"NAME": f"{DATABASES['sqlite']['TEST']['NAME']}.router"},
}
DATABASE_ROUTERS = ["tests.project.router.routers.YieldstarRouter"]
YIELDSTAR: dict[str, Any] = {
    **YIELDSTAR,
    "DATABASE_ALIAS": ROUTED_ALIAS,
    "WAKE_BACKEND": "yieldstar_django.testing.inline",
}
