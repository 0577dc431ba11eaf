"""The schemas the core knows only through its registry (``core/schema.py``): a DRF
``Serializer`` class, and Django's ``ValidationError`` raised by a callable schema.

Importing this module registers both; ``apps.py`` and ``definitions.py`` import it, so they
are registered in every process that sets Django up or calls ``define_store``, before any
store is defined. DRF is never imported here: a class is a serializer when it derives from
``rest_framework.serializers.BaseSerializer``, which is loaded once such a class exists.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ValidationError

from .core.errors import StoreIssue, StoreValidationError
from .core.schema import (
    SchemaAdapter,
    Validator,
    path_segment,
    register_rejection,
    register_schema_adapter,
)
from .core.types import StorePath

#: The name the error of an unsupported schema lists.
DRF_SERIALIZER = "DRF Serializer class"


def is_drf_serializer(schema: Any) -> bool:
    """Whether ``schema`` is a DRF serializer class."""
    serializers = sys.modules.get("rest_framework.serializers")
    return (
        serializers is not None
        and isinstance(schema, type)
        and issubclass(schema, serializers.BaseSerializer)
    )


def drf_issues(errors: Any, base: StorePath = ()) -> list[StoreIssue]:
    """A serializer's ``errors`` as issues: ``non_field_errors`` at the path of their
    serializer, a nested serializer's or a list item's under its field or index."""
    issues: list[StoreIssue] = []
    if isinstance(errors, Mapping):
        for key, value in errors.items():
            path = base if key == "non_field_errors" else (*base, path_segment(key))
            issues.extend(drf_issues(value, path))
    elif isinstance(errors, list):
        if all(isinstance(item, str) for item in errors):
            issues.extend({"message": str(item), "path": base} for item in errors)
        else:
            for index, item in enumerate(errors):
                if item:
                    issues.extend(drf_issues(item, (*base, index)))
    elif errors:
        issues.append({"message": str(errors), "path": base})
    return issues


def drf_validator(store_name: str, serializer_class: Any) -> Validator:
    """``validate(value)``: the serializer's ``validated_data``, or ``StoreValidationError``."""

    def validate(value: Any) -> Any:
        serializer = serializer_class(data=value)
        if not serializer.is_valid():
            raise StoreValidationError(store_name, drf_issues(serializer.errors))
        return serializer.validated_data

    return validate


def django_issues(exc: Any, base: StorePath = ()) -> list[StoreIssue]:
    """A Django ``ValidationError`` as issues: a field's errors under its name, ``__all__``'s
    at the root, each message with its ``params`` applied."""
    issues: list[StoreIssue] = []
    if hasattr(exc, "error_dict"):
        for field, errors in exc.error_dict.items():
            path = base if field == "__all__" else (*base, path_segment(field))
            for error in errors:
                issues.extend(django_issues(error, path))
        return issues
    for error in getattr(exc, "error_list", [exc]):
        message = error.message
        if error.params:
            try:
                message = message % error.params
            except (TypeError, KeyError, ValueError):
                pass
        issues.append({"message": str(message), "path": base})
    return issues


register_schema_adapter(
    DRF_SERIALIZER,
    SchemaAdapter(
        accepts=is_drf_serializer,
        validator=drf_validator,
        describe=lambda schema: f"DRF serializer {schema.__qualname__}",
    ),
)
register_rejection(ValidationError, django_issues)

__all__ = ["DRF_SERIALIZER", "django_issues", "drf_issues", "drf_validator", "is_drf_serializer"]
