"""The test suite's own app (label ``yieldstar_tests``): the models a project's workflow
writes with ``step.atomic``, for the runtime tests, the fault suite and the benchmark."""

from __future__ import annotations

from django.apps import AppConfig


class TestModelsConfig(AppConfig):
    name = "tests.shared"
    label = "yieldstar_tests"
    default_auto_field = "django.db.models.BigAutoField"
