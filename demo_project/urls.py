"""URLs of the demo project: the admin, DRF's login views and, once it exists, yieldstar's API."""

from __future__ import annotations

from importlib.util import find_spec

from django.contrib import admin
from django.urls import URLPattern, URLResolver, include, path

urlpatterns: list[URLPattern | URLResolver] = [
    path("admin/", admin.site.urls),
    path("api-auth/", include("rest_framework.urls")),
]


# yieldstar_django.api is written after this file; mount it as soon as it exists.
def _module_exists(name: str) -> bool:
    try:
        return find_spec(name) is not None
    except ModuleNotFoundError:  # the parent package does not exist (yet)
        return False


if _module_exists("yieldstar_django.api.urls"):
    urlpatterns.append(path("yieldstar/", include("yieldstar_django.api.urls")))
