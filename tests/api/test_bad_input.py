"""Every bad input is a 4xx JSON error that leaves the store unchanged; never a 500."""

from __future__ import annotations

import io
import json
import tomllib
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.exceptions import ParseError

from yieldstar_django.api.exceptions import RequestTooLarge
from yieldstar_django.api.parsers import SafeJSONParser, loads_json, read_limited
from yieldstar_django.core.definition import StoreDefinition
from yieldstar_django.core.errors import WorkflowValueError

pytestmark = pytest.mark.django_db

URL = "/yieldstar/stores/api-counter/bad/"
JSON = "application/json"
MERGE = "application/merge-patch+json"
PATCH = "application/json-patch+json"


@pytest.fixture
def before(api: Client, counter: StoreDefinition) -> Any:
    """The store's snapshot before the bad request (created and changed once)."""
    api.put(URL, json.dumps({"count": 1, "items": ["x"]}), content_type=JSON)
    return api.get(URL).json()


def nested(depth: int) -> str:
    return '{"count": 0, "items": ' + "[" * depth + "]" * depth + "}"


# Bodies built by code, by the error code they are refused with: (case, request line, body).
BUILT_BODIES: dict[str, list[tuple[str, str, str | bytes]]] = {
    "parse_error": [
        ("invalid UTF-8", f"PUT {JSON}", b'{"count": "\xff"}'),
        ("UTF-8 BOM", f"PUT {JSON}", b'\xef\xbb\xbf{"count": 1}'),
        ("deep nesting (recursion)", f"PUT {JSON}", nested(100_000)),
        ("nesting past MAX_DEPTH", f"PUT {JSON}", nested(300)),
    ],
    "not_durable": [
        ("integer of 5000 digits", f"PUT {JSON}", '{"count": ' + "9" * 5000 + "}"),
        ("merge patch: integer of 4301 digits", f"PATCH {MERGE}", '{"n": -1' + "0" * 4300 + "}"),
        ("nesting just past the state limit", f"PUT {JSON}", nested(256)),
        (
            "integer of 5000 digits under a lone-surrogate key",
            f"PUT {JSON}",
            '{"count": 1, "\\ud800": ' + "9" * 5000 + "}",
        ),
    ],
}


def bad_bodies() -> list[tuple[str, str, str | bytes, int, str]]:
    """(case, request line, raw body, status, code): the cases of ``bad_bodies.toml``
    and ``BUILT_BODIES``."""
    table = tomllib.loads((Path(__file__).parent / "bad_bodies.toml").read_text("utf-8"))
    return [
        (case, request_line, body, entry["status"], code)
        for code, entry in table.items()
        for case, request_line, body in [*entry["cases"], *BUILT_BODIES.get(code, [])]
    ]


BAD_BODIES = bad_bodies()


@pytest.mark.parametrize(
    ("request_line", "body", "status", "code"),
    [case[1:] for case in BAD_BODIES],
    ids=[case[0] for case in BAD_BODIES],
)
def test_bad_bodies(
    api: Client, before: Any, request_line: str, body: str | bytes, status: int, code: str
) -> None:
    method, content_type = request_line.split(" ", 1)
    call = getattr(api, method.lower())
    response = call(URL, body, content_type=content_type)
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    payload = response.json()
    assert payload["code"] == code, payload
    assert payload["detail"]
    assert api.get(URL).json() == before


@pytest.mark.parametrize(
    ("request_line", "body"),
    [case[1:3] for case in BAD_BODIES],
    ids=[case[0] for case in BAD_BODIES],
)
def test_bad_bodies_create_no_store(
    api: Client, counter: StoreDefinition, request_line: str, body: str | bytes
) -> None:
    """A refused write to a store that does not exist yet leaves it missing (the write
    is checked on the initial state before anything is inserted)."""
    from yieldstar_django.models import StoreInstance

    missing = "/yieldstar/stores/api-counter/never-written/"
    method, content_type = request_line.split(" ", 1)
    response = getattr(api, method.lower())(missing, body, content_type=content_type)
    assert 400 <= response.status_code < 500, response.content
    assert not StoreInstance.objects.filter(name="api-counter", store_id="never-written").exists()
    assert api.get(missing).status_code == 404


def test_schema_rejection_lists_issues_with_paths(api: Client, before: Any) -> None:
    response = api.put(URL, json.dumps({"count": -1, "items": "no"}), content_type=JSON)
    assert response.status_code == 400
    issues = response.json()["issues"]
    assert sorted(issue["path"] for issue in issues) == [["count"], ["items"]]
    assert all(issue["message"] for issue in issues)


def test_not_durable_names_the_path(api: Client, before: Any) -> None:
    body = '{"count": 1, "deep": {"list": [0, "\\u0000"]}}'
    response = api.put(URL, body, content_type=JSON)
    assert response.status_code == 400
    assert response.json()["path"] == ["deep", "list", 1]


def test_integer_over_4300_digits_names_the_path(api: Client, before: Any) -> None:
    ops = '[{"op": "add", "path": "/items/-", "value": {"n": ' + "7" * 4301 + "}}]"
    response = api.patch(URL, ops, content_type=PATCH)
    assert response.status_code == 400, response.content
    payload = response.json()
    assert (payload["code"], payload["path"]) == ("not_durable", [0, "value", "n"])
    assert "4300 digits" in payload["detail"]
    assert api.get(URL).json() == before
    response = api.put(URL, '{"count": 1, "items": [], "n": ' + "9" * 4300 + "}", content_type=JSON)
    assert response.status_code == 200, response.content
    assert api.get(URL).json()["state"]["n"] == int("9" * 4300)


def test_charset_parameter_is_accepted(api: Client, before: Any) -> None:
    response = api.put(URL, '{"count": 2}', content_type="application/json; charset=utf-8")
    assert response.status_code == 200


def test_body_over_the_limit_is_413(api: Client, before: Any, settings: Any) -> None:
    settings.YIELDSTAR = {**settings.YIELDSTAR, "API_MAX_BODY_BYTES": 100}
    body = json.dumps({"count": 1, "items": ["x" * 200]})
    for method, content_type in [("put", JSON), ("patch", MERGE)]:
        response = getattr(api, method)(URL, body, content_type=content_type)
        assert response.status_code == 413
        assert response.json()["code"] == "request_too_large"
    assert api.get(URL).json() == before


def test_state_over_the_limit_is_400(api: Client, before: Any, settings: Any) -> None:
    settings.YIELDSTAR = {**settings.YIELDSTAR, "MAX_STATE_BYTES": 100}
    body = json.dumps({"count": 1, "items": ["x" * 200]})
    response = api.put(URL, body, content_type=JSON)
    assert response.status_code == 400
    assert response.json()["code"] == "not_durable"


def test_json_patch_copies_stop_at_the_state_limit(api: Client, before: Any, settings: Any) -> None:
    """Each ``copy`` of the whole document doubles it: a patch of a few dozen such
    operations (about 40 bytes each) grew the state past any memory before the commit
    could refuse its size (``2**n`` times the state after ``n`` of them). The copies of a
    patch are bounded by ``MAX_STATE_BYTES`` now: the copy that passes it is refused
    (``409`` ``patch_conflict``, naming it), and nothing is written. Here 12 copies would
    make a state of about 100 KB; the limit is 1 KiB, reached by the sixth copy."""
    settings.YIELDSTAR = {**settings.YIELDSTAR, "MAX_STATE_BYTES": 1024}
    doubling = [{"op": "copy", "from": "", "path": f"/copy{i}"} for i in range(12)]
    response = api.patch(URL, json.dumps(doubling), content_type=PATCH)
    assert response.status_code == 409, response.content
    error = response.json()
    assert error["code"] == "patch_conflict"
    assert "MAX_STATE_BYTES" in error["detail"]
    assert error["operation"] < 6
    assert api.get(URL).json() == before


def test_read_limited_stops_reading() -> None:
    stream = io.BytesIO(b"x" * 10_000_000)
    with pytest.raises(RequestTooLarge):
        read_limited(stream)
    assert stream.tell() <= 8 * 1024 * 1024 + 64 * 1024 + 1


def test_put_integer_over_4300_digits_names_the_state_path(api: Client, before: Any) -> None:
    response = api.put(URL, '{"count": 1, "items": [' + "8" * 4400 + "]}", content_type=JSON)
    assert response.status_code == 400, response.content
    assert response.json()["path"] == ["items", 0]
    assert api.get(URL).json() == before


def test_loads_json_never_raises_anything_else() -> None:
    for raw in [b"[" * 1_000_000, b'"\\ud800"', b"\x00", b'{"a": 1, }']:
        try:
            loads_json(raw, max_depth=256)
        except ParseError:
            pass
    with pytest.raises(WorkflowValueError):
        loads_json(b"1" * 10_000, max_depth=256)


def test_the_parser_drops_the_bytes_before_decoding() -> None:
    """A body's bytes are not held beside its text and its decoded value: a body of one
    long string peaks near twice its size (the text and the string), not three times."""
    size = 4_000_000
    body = b'["' + b"x" * size + b'"]'
    tracemalloc.start()
    try:
        value = SafeJSONParser().parse(io.BufferedReader(io.BytesIO(body)))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert value == ["x" * size]
    assert peak < 2.5 * size, peak / size


@pytest.mark.parametrize(
    "id", ["x" * 256, "nul\x00", "%00"], ids=["too long", "NUL", "percent-encoded NUL"]
)
def test_impossible_ids_are_404(api: Client, counter: StoreDefinition, id: str) -> None:
    if id == "%00":
        path = "/yieldstar/stores/api-counter/%00/"
    else:
        path = reverse("yieldstar:store-detail", args=["api-counter", id])
    response = api.get(path)
    assert response.status_code == 404
    assert response.json()["code"] == "invalid_store_id"


def test_a_lone_surrogate_in_a_path_is_escaped(api: Client, before: Any) -> None:
    """The error's ``path`` names a key holding a lone surrogate with the escape that
    wrote it (a JSON response cannot hold the surrogate itself)."""
    response = api.put(URL, '{"count": 1, "a": {"\\ud800": 1}}', content_type=JSON)
    assert response.status_code == 400
    payload = response.json()
    assert (payload["code"], payload["path"]) == ("not_durable", ["a", "\\ud800"])
    assert api.get(URL).json() == before
