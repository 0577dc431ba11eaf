"""URLs of the demo project: the admin, DRF's login views and yieldstar's API."""

from __future__ import annotations

from django.contrib import admin
from django.urls import URLPattern, URLResolver, include, path

urlpatterns: list[URLPattern | URLResolver] = [
    path("admin/", admin.site.urls),
    path("api-auth/", include("rest_framework.urls")),
    path("yieldstar/", include("yieldstar_django.api.urls")),
]
