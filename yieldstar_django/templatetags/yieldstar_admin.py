"""Template tags of the admin: ``{% yieldstar_health_banner %}``, the banner the admin
index shows when a health check fails (``yieldstar_django/admin/index.html``; add the tag
to a custom admin site's index template to show it there)."""

from __future__ import annotations

import logging
from typing import Any

from django import template
from django.db import DatabaseError

from ..health import cached_report

register = template.Library()
logger = logging.getLogger("yieldstar_django.health")

__all__ = ["health_banner", "register"]


def health_banner(context: Any) -> dict[str, Any]:
    """The failing checks of the cached health report, for staff who may view executions;
    nothing for others, or when the checks themselves fail (logged)."""
    request = getattr(context, "request", None) or context.get("request")
    user = getattr(request, "user", None)
    if user is None or not user.has_perm("yieldstar.view_execution"):
        return {"problems": []}
    try:
        report = cached_report()
    except DatabaseError:
        logger.warning("the admin's health banner could not check", exc_info=True)
        return {"problems": []}
    return {"problems": report.problems, "checked_at": report.checked_at}


register.inclusion_tag(
    "yieldstar_django/admin/health_banner.html", takes_context=True, name="yieldstar_health_banner"
)(health_banner)
