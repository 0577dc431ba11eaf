"""Schemas: turn any supported schema into one ``validate(value) -> value``.

See ``docs/concepts/stores.md``.

Supported here: a callable ``validate(value)`` (returning ``None`` accepts its input
unchanged; ``ValueError``/``TypeError`` reject), a pydantic model class or ``TypeAdapter``,
a JSON Schema ``dict`` (``jsonschema``), or ``None`` (any durable value). Optional
libraries are imported only when such a schema is used. Other kinds of schema, and other
errors a callable may reject with, are taught by the layer that knows them
(``register_schema_adapter``, ``register_rejection``): the Django side registers DRF
``Serializer`` classes and Django's ``ValidationError`` (``yieldstar_django.schema_adapters``).
Every rejection becomes ``StoreValidationError`` with ``issues`` of ``{"message", "path"}``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .errors import StoreIssue, StoreValidationError
from .types import PathSegment, StorePath

Validator = Callable[[Any], Any]
#: The issues of an error a callable schema raised.
Rejection = Callable[[Any], list[StoreIssue]]


@dataclass(frozen=True)
class SchemaAdapter:
    """A kind of schema the core does not know: ``accepts(schema)`` says whether a schema
    is of it, ``validator(store_name, schema)`` compiles one into a ``Validator`` (raising
    ``StoreValidationError`` on a rejection), ``describe(schema)`` names it."""

    accepts: Callable[[Any], bool]
    validator: Callable[[str, Any], Validator]
    describe: Callable[[Any], str]


_adapters: dict[str, SchemaAdapter] = {}


def _message(exc: Any) -> list[StoreIssue]:
    return [{"message": str(exc) or type(exc).__name__, "path": ()}]


_rejections: dict[type, Rejection] = {ValueError: _message, TypeError: _message}


def register_schema_adapter(name: str, adapter: SchemaAdapter) -> None:
    """Make ``compile_schema`` and ``describe_schema`` accept the schemas ``adapter``
    accepts, ahead of the pydantic and callable kinds. ``name`` (say ``"DRF Serializer
    class"``) is what the error of an unsupported schema lists; registering it again
    replaces its adapter."""
    _adapters[name] = adapter


def register_rejection(error_class: type[BaseException], issues: Rejection) -> None:
    """Make a callable schema that raises ``error_class`` (or a subclass of it) reject the
    value with ``issues(exc)``, as ``ValueError`` and ``TypeError`` do (one message at the
    root). The most derived registered class of the error wins."""
    _rejections[error_class] = issues


def _adapter(schema: Any) -> SchemaAdapter | None:
    return next((a for a in list(_adapters.values()) if a.accepts(schema)), None)


def _mro_names(cls: type) -> set[str]:
    return {f"{base.__module__}.{base.__qualname__}" for base in cls.__mro__}


def _is_pydantic_model(schema: Any) -> bool:
    return isinstance(schema, type) and "pydantic.main.BaseModel" in _mro_names(schema)


def _is_type_adapter(schema: Any) -> bool:
    return type(schema).__module__.startswith("pydantic") and hasattr(schema, "validate_python")


def path_segment(value: Any) -> PathSegment:
    """A path segment as a schema library named it: a list index is an ``int``, anything
    else (a dict key or field name, even ``"7"``) its ``str``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    return str(value)


def _path(parts: Iterable[Any]) -> StorePath:
    return tuple(path_segment(p) for p in parts)


def describe_schema(schema: Any) -> str:
    """A short human name of the schema's kind (for the admin and the API)."""
    if schema is None:
        return "any durable value"
    if isinstance(schema, dict):
        return "JSON Schema"
    adapter = _adapter(schema)
    if adapter is not None:
        return adapter.describe(schema)
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
    adapter = _adapter(schema)
    if adapter is not None:
        return adapter.validator(store_name, schema)
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
    kinds = ", ".join(["a callable", *(f"a {name}" for name in _adapters)])
    raise TypeError(
        f"Unsupported schema for store {store_name!r}: {schema!r}. Use {kinds}, a pydantic "
        "model or TypeAdapter, a JSON Schema dict, or None."
    )


def _callable_validator(store_name: str, schema: Callable[[Any], Any]) -> Validator:
    def validate(value: Any) -> Any:
        try:
            result = schema(value)
        except Exception as exc:
            issues = _rejection_issues(exc)
            if issues is None:
                raise
            raise StoreValidationError(store_name, issues) from exc
        return value if result is None else result

    return validate


def _rejection_issues(exc: Exception) -> list[StoreIssue] | None:
    """The issues of a registered rejection ``exc`` is, or ``None``."""
    for cls in type(exc).__mro__:
        issues = _rejections.get(cls)
        if issues is not None:
            return issues(exc)
    return None


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


__all__ = [
    "Rejection",
    "SchemaAdapter",
    "Validator",
    "compile_schema",
    "describe_schema",
    "path_segment",
    "register_rejection",
    "register_schema_adapter",
]
