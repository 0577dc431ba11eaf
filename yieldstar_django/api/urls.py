"""URLs of the HTTP API. Mount with ``path("yieldstar/", include("yieldstar_django.api.urls"))``.

Names (namespace ``yieldstar``): ``root``, ``schema``, ``store-list``, ``store-ids``,
``store-detail``, ``execution-list``, ``execution-detail``, ``execution-cancel``,
``execution-retry``, ``execution-fork``, ``schedule-list``, ``schedule-detail``,
``schedule-pause``, ``schedule-resume``, ``schedule-trigger``; ``not-found`` answers a JSON
``404`` for any other URL under the prefix. A store id may hold ``/``
(``stores/<name>/tenant/7/``); an execution id started through the API may not, nor may a
schedule's name.
"""

from __future__ import annotations

from django.urls import URLPattern, path, re_path, register_converter

from . import executions, root, schedules, store_lists, views
from .openapi import YieldstarSchemaView

app_name = "yieldstar"


class StoreIdConverter:
    """Any non-empty text, ``/`` and line breaks included (``path`` stops at ``\n``)."""

    regex = r"[\s\S]+"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(StoreIdConverter, "yieldstar_store_id")

urlpatterns: list[URLPattern] = [
    path("", root.ApiRootView.as_view(), name="root"),
    path("schema/", YieldstarSchemaView.as_view(), name="schema"),
    path("stores/", store_lists.StoreDefinitionListView.as_view(), name="store-list"),
    path("stores/<str:name>/", store_lists.StoreIdListView.as_view(), name="store-ids"),
    path(
        "stores/<str:name>/<yieldstar_store_id:id>/",
        views.StoreDetailView.as_view(),
        name="store-detail",
    ),
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
    path(
        "executions/<str:execution_id>/retry/",
        executions.ExecutionRetryView.as_view(),
        name="execution-retry",
    ),
    path(
        "executions/<str:execution_id>/fork/",
        executions.ExecutionForkView.as_view(),
        name="execution-fork",
    ),
    path("schedules/", schedules.ScheduleListView.as_view(), name="schedule-list"),
    path("schedules/<str:name>/", schedules.ScheduleDetailView.as_view(), name="schedule-detail"),
    path(
        "schedules/<str:name>/pause/",
        schedules.SchedulePauseView.as_view(),
        name="schedule-pause",
    ),
    path(
        "schedules/<str:name>/resume/",
        schedules.ScheduleResumeView.as_view(),
        name="schedule-resume",
    ),
    path(
        "schedules/<str:name>/trigger/",
        schedules.ScheduleTriggerView.as_view(),
        name="schedule-trigger",
    ),
    re_path(r"^(?P<path>[\s\S]*)$", root.NotFoundView.as_view(), name="not-found"),
]
