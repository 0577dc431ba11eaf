"""The bench's URLconf: the test suite's, plus the floor view of ``bench.floor``."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path

from tests.urls import urlpatterns as test_urlpatterns

from .floor import store_body

urlpatterns: list[URLPattern | URLResolver] = [
    path("bench/floor/<str:id>/", store_body),
    *test_urlpatterns,
]
