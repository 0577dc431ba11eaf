"""Schemas: turn any supported schema into one ``validate(value) -> value``.

See ``docs/concepts/stores.md``.

Supported: a callable ``validate(value)`` (returning ``None`` accepts its input unchanged;
``ValueError``/``TypeError`` or Django's ``ValidationError`` reject), a DRF ``Serializer``
class, a pydantic model class or ``TypeAdapter``, a JSON Schema ``dict`` (``jsonschema``), or
``None`` (any durable value). Optional libraries are imported only when such a schema is used.
Every rejection becomes ``StoreValidationError`` with ``issues`` of ``{"message", "path"}``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .errors import StoreIssue, StoreValidationError
from .types import PathSegment, StorePath

Validator = Callable[[Any], Any]


def _mro_names(cls: type) -> set[str]:
    return {f"{base.__module__}.{base.__qualname__}" for base in cls.__mro__}


def _is_drf_serializer(schema: Any) -> bool:
    return isinstance(schema, type) and (
        "rest_framework.serializers.BaseSerializer" in _mro_names(schema)
    )


def _is_pydantic_model(schema: Any) -> bool:
    return isinstance(schema, type) and "pydantic.main.BaseModel" in _mro_names(schema)


def _is_type_adapter(schema: Any) -> bool:
    return type(schema).__module__.startswith("pydantic") and hasattr(schema, "validate_python")


def _segment(value: Any) -> PathSegment:
    """A path segment as the library named it: a list index is an ``int``, anything else
    (a dict key or field name, even ``"7"``) its ``str``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    return str(value)


def _path(parts: Iterable[Any]) -> StorePath:
    return tuple(_segment(p) for p in parts)


def describe_schema(schema: Any) -> str:
    """A short human name of the schema's kind (for the admin and the API)."""
    if schema is None:
        return "any durable value"
    if isinstance(schema, dict):
        return "JSON Schema"
    if _is_drf_serializer(schema):
        return f"DRF serializer {schema.__qualname__}"
    if _is_pydantic_model(schema):
        return f"pydantic model {schema.__qualname__}"
    if _is_type_adapter(schema):
        return "pydantic TypeAdapter"
    return f"validator {getattr(schema, '__qualname__', type(schema).__qualname__)}"


def compile_schema(store_name: str, schema: Any) -> Validator:
    """Return ``validate(value) -> state`` for ``schema``; raises ``TypeError`` if unsupported."""
    if schema is None:
        return lambda value: value
    if isinstance(schema, dict):
        return _json_schema_validator(store_name, schema)
    if _is_drf_serializer(schema):
        return _drf_validator(store_name, schema)
    if _is_pydantic_model(schema):
        return _pydantic_validator(
            store_name, schema.model_validate, lambda model: model.model_dump(mode="json")
        )
    if _is_type_adapter(schema):
        return _pydantic_validator(
            store_name, schema.validate_python, lambda value: schema.dump_python(value, mode="json")
        )
    if callable(schema) and not isinstance(schema, type):
        return _callable_validator(store_name, schema)
    raise TypeError(
        f"Unsupported schema for store {store_name!r}: {schema!r}. Use a callable, a DRF "
        "Serializer class, a pydantic model or TypeAdapter, a JSON Schema dict, or None."
    )


def _callable_validator(store_name: str, schema: Callable[[Any], Any]) -> Validator:
    from django.core.exceptions import ValidationError as DjangoValidationError

    def validate(value: Any) -> Any:
        try:
            result = schema(value)
        except DjangoValidationError as exc:
            raise StoreValidationError(store_name, _django_issues(exc)) from exc
        except (ValueError, TypeError) as exc:
            raise StoreValidationError(
                store_name, [{"message": str(exc) or type(exc).__name__, "path": ()}]
            ) from exc
        return value if result is None else result

    return validate


def _django_issues(exc: Any, base: StorePath = ()) -> list[StoreIssue]:
    issues: list[StoreIssue] = []
    if hasattr(exc, "error_dict"):
        for field, errors in exc.error_dict.items():
            path = base if field == "__all__" else (*base, _segment(field))
            for error in errors:
                issues.extend(_django_issues(error, path))
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


def _drf_issues(errors: Any, base: StorePath = ()) -> list[StoreIssue]:
    issues: list[StoreIssue] = []
    if isinstance(errors, Mapping):
        for key, value in errors.items():
            path = base if key == "non_field_errors" else (*base, _segment(key))
            issues.extend(_drf_issues(value, path))
    elif isinstance(errors, list):
        if all(isinstance(item, str) for item in errors):
            issues.extend({"message": str(item), "path": base} for item in errors)
        else:
            for index, item in enumerate(errors):
                if item:
                    issues.extend(_drf_issues(item, (*base, index)))
    elif errors:
        issues.append({"message": str(errors), "path": base})
    return issues


def _drf_validator(store_name: str, serializer_class: Any) -> Validator:
    def validate(value: Any) -> Any:
        serializer = serializer_class(data=value)
        if not serializer.is_valid():
            raise StoreValidationError(store_name, _drf_issues(serializer.errors))
        return serializer.validated_data

    return validate


def _pydantic_issues(exc: Any) -> list[StoreIssue]:
    return [{"message": err["msg"], "path": _path(err.get("loc", ()))} for err in exc.errors()]


def _pydantic_validator(
    store_name: str, parse: Callable[[Any], Any], dump: Callable[[Any], Any]
) -> Validator:
    """``dump(parse(value))``; pydantic's ``ValidationError`` from ``parse`` becomes a
    ``StoreValidationError`` with its issues."""
    from pydantic import ValidationError

    def validate(value: Any) -> Any:
        try:
            result = parse(value)
        except ValidationError as exc:
            raise StoreValidationError(store_name, _pydantic_issues(exc)) from exc
        return dump(result)

    return validate


def _json_schema_validator(store_name: str, schema: dict[str, Any]) -> Validator:
    try:
        import jsonschema
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise TypeError(
            f"Store {store_name!r} uses a JSON Schema; install yieldstar-django[jsonschema]"
        ) from exc
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    validator = validator_class(schema)

    def validate(value: Any) -> Any:
        errors = sorted(validator.iter_errors(value), key=lambda e: list(map(str, e.absolute_path)))
        if errors:
            raise StoreValidationError(
                store_name,
                [{"message": e.message, "path": _path(e.absolute_path)} for e in errors],
            )
        return value

    return validate


__all__ = ["Validator", "compile_schema", "describe_schema"]
