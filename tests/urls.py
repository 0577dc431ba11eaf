"""URLs for the test suite: the admin and yieldstar's API."""

from __future__ import annotations

from django.contrib import admin
from django.urls import URLPattern, URLResolver, include, path

urlpatterns: list[URLPattern | URLResolver] = [
    path("admin/", admin.site.urls),
    path("yieldstar/", include("yieldstar_django.api.urls")),
]
