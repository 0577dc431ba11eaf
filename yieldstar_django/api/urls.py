"""URLs of the HTTP API. Mount with ``path("yieldstar/", include("yieldstar_django.api.urls"))``.

Names (namespace ``yieldstar``): ``schema``, ``store-list``, ``store-ids``, ``store-detail``,
``execution-list``, ``execution-detail``, ``execution-cancel``.
"""

from __future__ import annotations

from django.urls import URLPattern, path

from . import executions, views
from .openapi import YieldstarSchemaView

app_name = "yieldstar"

urlpatterns: list[URLPattern] = [
    path("schema/", YieldstarSchemaView.as_view(), name="schema"),
    path("stores/", views.StoreDefinitionListView.as_view(), name="store-list"),
    path("stores/<str:name>/", views.StoreIdListView.as_view(), name="store-ids"),
    path("stores/<str:name>/<str:id>/", views.StoreDetailView.as_view(), name="store-detail"),
    path("executions/", executions.ExecutionStartView.as_view(), name="execution-list"),
    path(
        "executions/<str:execution_id>/",
        executions.ExecutionDetailView.as_view(),
        name="execution-detail",
    ),
    path(
        "executions/<str:execution_id>/cancel/",
        executions.ExecutionCancelView.as_view(),
        name="execution-cancel",
    ),
]
