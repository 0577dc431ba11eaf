"""Every supported schema kind accepts, transforms and rejects with issues and paths.

The DRF and Django kinds are the Django side's (``yieldstar_django.schema_adapters``,
registered when the app config or ``define_store`` is imported); the core compiles the
others without Django.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest

from yieldstar_django import schema_adapters
from yieldstar_django.core.errors import StoreValidationError
from yieldstar_django.core.schema import compile_schema, describe_schema


def reject(schema: Any, value: Any) -> list[Any]:
    with pytest.raises(StoreValidationError) as info:
        compile_schema("s", schema)(value)
    assert str(info.value).startswith('Invalid store state for "s"')
    for issue in info.value.issues:
        assert issue["message"] in str(info.value)
    return info.value.issues


def test_callable_returning_none_accepts_input_unchanged() -> None:
    value = {"a": 1}
    assert compile_schema("s", lambda v: None)(value) is value


def test_callable_may_transform_and_may_reject() -> None:
    assert compile_schema("s", lambda v: {**v, "b": 2})({"a": 1}) == {"a": 1, "b": 2}

    def no(value: Any) -> None:
        raise ValueError("nope")

    assert reject(no, {}) == [{"message": "nope", "path": ()}]


def test_a_callable_raising_another_error_lets_it_through() -> None:
    def broken(value: Any) -> None:
        raise KeyError("bug")

    with pytest.raises(KeyError, match="bug"):
        compile_schema("s", broken)({})


def test_django_validation_error_with_fields() -> None:
    from django.core.exceptions import ValidationError

    def validate(value: Any) -> None:
        raise ValidationError({"count": ["too small"], "__all__": ["bad %(x)s"]}, params={"x": 1})

    issues = reject(validate, {})
    assert {"message": "too small", "path": ("count",)} in issues
    assert len(issues) == 2


def test_drf_serializer() -> None:
    from rest_framework import serializers

    class Item(serializers.Serializer[Any]):
        name = serializers.CharField()

    class State(serializers.Serializer[Any]):
        count = serializers.IntegerField(min_value=0)
        items = Item(many=True, required=False, default=list)

    validate = compile_schema("s", State)
    assert dict(validate({"count": 1})) == {"count": 1, "items": []}
    issues = reject(State, {"count": -1, "items": [{"name": "ok"}, {}]})
    paths = {tuple(i["path"]) for i in issues}
    assert ("count",) in paths
    assert ("items", 1, "name") in paths
    assert describe_schema(State).startswith("DRF serializer")
    assert schema_adapters.is_drf_serializer(State)
    assert not schema_adapters.is_drf_serializer(State())


def test_pydantic_model_and_type_adapter() -> None:
    import pydantic

    class Job(pydantic.BaseModel):
        id: int
        tags: list[str] = []

    class State(pydantic.BaseModel):
        jobs: list[Job]

    assert compile_schema("s", State)({"jobs": [{"id": 1}]}) == {"jobs": [{"id": 1, "tags": []}]}
    issues = reject(State, {"jobs": [{"id": "x"}]})
    assert issues[0]["path"] == ("jobs", 0, "id")
    adapter = pydantic.TypeAdapter(list[int])
    assert compile_schema("s", adapter)(["1", 2]) == [1, 2]
    assert reject(adapter, ["x"])[0]["path"] == (0,)


def test_json_schema() -> None:
    schema = {
        "type": "object",
        "properties": {
            "count": {"type": "integer", "minimum": 0},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["count"],
    }
    value = {"count": 1}
    assert compile_schema("s", schema)(value) is value
    issues = reject(schema, {"count": -1, "tags": ["a", 2]})
    assert sorted(tuple(i["path"]) for i in issues) == [("count",), ("tags", 1)]
    with pytest.raises(
        Exception, match=r"is not valid under any of the given schemas|is not of type"
    ):
        compile_schema("s", {"type": 12})


def test_unsupported_schema_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="Unsupported schema"):
        compile_schema("s", 42)
    with pytest.raises(TypeError, match="Unsupported schema"):
        compile_schema("s", int)


def _counts_schemas() -> list[Any]:
    """One schema of each library for ``{"counts": {str: int}, "seen": [int]}``."""
    import pydantic
    from rest_framework import serializers

    class Model(pydantic.BaseModel):
        counts: dict[str, int]
        seen: list[int] = []

    class Serializer(serializers.Serializer[Any]):
        counts = serializers.DictField(child=serializers.IntegerField())
        seen = serializers.ListField(child=serializers.IntegerField(), required=False)

    json_schema = {
        "type": "object",
        "properties": {
            "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
            "seen": {"type": "array", "items": {"type": "integer"}},
        },
    }
    return [json_schema, Model, Serializer]


@pytest.mark.parametrize("kind", ["JSON Schema", "pydantic", "DRF"])
def test_issue_paths_keep_dict_keys_that_read_as_digits_as_keys(kind: str) -> None:
    """A dict key is a ``str`` segment whatever it spells: ``"7"`` is not the list index
    ``7``, and ``"²"`` (a digit to ``str.isdigit``, no decimal to ``int``) is a key, not
    an error of the schema's adapter; a list index stays an ``int``."""
    schema = _counts_schemas()[["JSON Schema", "pydantic", "DRF"].index(kind)]
    state = {"counts": {"7": "x", "²": "y", "٣": "z", "a": 1}, "seen": [1, "n"]}
    issues = reject(schema, state)
    paths = sorted(tuple(map(repr, i["path"])) for i in issues)
    assert paths == sorted(
        tuple(map(repr, path))
        for path in [("counts", "7"), ("counts", "²"), ("counts", "٣"), ("seen", 1)]
    )


def _run(script: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_core_compiles_schemas_without_django() -> None:
    script = """
        import sys
        for blocked in ("django", "rest_framework"):
            sys.modules[blocked] = None
        from yieldstar_django.core.definition import StoreDefinition
        from yieldstar_django.core.errors import StoreValidationError
        from yieldstar_django.core.memory import MemoryStoreClient
        from yieldstar_django.core.schema import compile_schema

        def positive(state):
            if state["n"] < 0:
                raise ValueError("negative")

        d = StoreDefinition("plain", positive, lambda id: {"n": 0})
        c = MemoryStoreClient()
        assert c.update_store(d, "a", updater=lambda s: s.update(n=1)).state == {"n": 1}
        try:
            c.update_store(d, "a", updater=lambda s: s.update(n=-1))
        except StoreValidationError as exc:
            assert exc.issues == [{"message": "negative", "path": ()}]
        try:
            compile_schema("s", 42)
        except TypeError as exc:
            assert "DRF" not in str(exc), exc
        assert not any(name.split(".")[0] in ("django", "rest_framework") for name in
                       [n for n, m in sys.modules.items() if m is not None])
        print("ok")
        """
    assert _run(script) == "ok"


def test_define_store_takes_drf_and_django_validation_before_the_app_registry() -> None:
    """As in a ``models`` module: settings configured, the app registry not ready."""
    script = """
        from django.conf import settings
        settings.configure(USE_I18N=False)
        from django.apps import apps
        from django.core.exceptions import ValidationError
        from rest_framework import serializers
        import yieldstar_django as y

        class Count(serializers.Serializer):
            n = serializers.IntegerField(min_value=0)

        def positive(state):
            if state["n"] < 0:
                raise ValidationError({"n": ["negative"]})

        assert not apps.ready
        c = y.MemoryStoreClient()
        for schema, message in [(Count, "greater than or equal to 0"), (positive, "negative")]:
            d = y.define_store(schema.__name__, schema, initial=lambda id: {"n": 0})
            assert c.update_store(d, "a", updater=lambda s: s.update(n=1)).state == {"n": 1}
            try:
                c.update_store(d, "a", updater=lambda s: s.update(n=-1))
                raise AssertionError("accepted")
            except y.StoreValidationError as exc:
                (issue,) = exc.issues
                assert issue["path"] == ("n",) and message in issue["message"], issue
        d = y.StoreDefinition("direct", Count, lambda id: {"n": 0})
        assert d.validator({"n": 2}) == {"n": 2}
        print("ok")
        """
    assert _run(script) == "ok"
