"""The ``/metrics`` view: the runtime's metrics in Prometheus' text format.

Not routed by the package: a project includes one of the two views where its scraper
looks. :func:`metrics_view` answers users with the ``yieldstar.view_execution``
permission (HTTP basic or session authentication of the project's); :func:`public_metrics_view`
answers anyone, for a URL only internal networks reach."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from . import metrics

__all__ = ["metrics_view", "public_metrics_view"]


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """The metrics, for a user with the ``yieldstar.view_execution`` permission (a
    scraper's account, or staff); ``403`` otherwise. With metrics off, ``404``."""
    user = request.user
    if not (user.is_authenticated and user.has_perm("yieldstar.view_execution")):
        raise PermissionDenied
    return public_metrics_view(request)


@require_GET
def public_metrics_view(request: HttpRequest) -> HttpResponse:
    """The metrics for any request: only for a URL that internal networks alone reach (a
    port of its own, or a path the proxy does not forward)."""
    if not metrics.enabled():
        return HttpResponse("metrics are off\n", status=404, content_type="text/plain")
    body, content_type = metrics.exposition()
    return HttpResponse(body, content_type=content_type)
