"""Schemathesis against the served OpenAPI schema: no server errors, and every response
conforms to the schema (status code, content type, headers, body).

The schema is fetched from ``/yieldstar/schema/`` through the WSGI app (no server, no
network), then every operation gets a bounded number of generated requests: schema-valid
ones and schema-violating ones. (Schemathesis's own pytest loader does not work with this
pytest version, so the test drives Hypothesis directly.)
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings, strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from yieldstar_django.core.definition import StoreDefinition, define_store, unregister_store
from yieldstar_django.runtime import start_workflow

from . import workflows  # noqa: F401  (registers api-test-greet)

pytestmark = pytest.mark.slow

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
#: Requests per operation and generation mode.
EXAMPLES = 30

AUTH = {"Authorization": "Basic " + base64.b64encode(b"fuzz:pw").decode()}


EXECUTION_ID = "fuzz-execution"


@pytest.fixture
def free() -> Iterator[StoreDefinition]:
    """A store without a schema, so generated states are accepted."""
    definition = define_store("api-free", None, initial=lambda id: {})
    yield definition
    unregister_store(definition.name)


@pytest.fixture
def api_schema(
    db: None,
    django_user_model: Any,
    counter: StoreDefinition,
    private: StoreDefinition,
    free: StoreDefinition,
) -> Iterator[Any]:
    django_user_model.objects.create_superuser("fuzz", password="pw")
    start_workflow("api-test-greet", "fuzz", execution_id=EXECUTION_ID)
    # As Django's test client does: a finished request must not close the connection that
    # holds the test's transaction.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield schemathesis.openapi.from_wsgi(
            "/yieldstar/schema/", get_wsgi_application(), headers=AUTH
        )
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def operations(schema: Any) -> list[Any]:
    return [result.ok() for result in schema.get_all_operations()]


def test_schema_documents_every_operation(api_schema: Any) -> None:
    labels = sorted(operation.label for operation in operations(api_schema))
    assert labels == [
        "DELETE /yieldstar/stores/{name}/{id}/",
        "GET /yieldstar/",
        "GET /yieldstar/executions/",
        "GET /yieldstar/executions/{execution_id}/",
        "GET /yieldstar/queues/",
        "GET /yieldstar/schedules/",
        "GET /yieldstar/schedules/{name}/",
        "GET /yieldstar/stores/",
        "GET /yieldstar/stores/{name}/",
        "GET /yieldstar/stores/{name}/{id}/",
        "PATCH /yieldstar/stores/{name}/{id}/",
        "POST /yieldstar/executions/",
        "POST /yieldstar/executions/{execution_id}/cancel/",
        "POST /yieldstar/executions/{execution_id}/fork/",
        "POST /yieldstar/executions/{execution_id}/retry/",
        "POST /yieldstar/queues/{name}/pause/",
        "POST /yieldstar/queues/{name}/resume/",
        "POST /yieldstar/schedules/",
        "POST /yieldstar/schedules/{name}/pause/",
        "POST /yieldstar/schedules/{name}/resume/",
        "POST /yieldstar/schedules/{name}/trigger/",
        "PUT /yieldstar/stores/{name}/{id}/",
    ]


def strategy(operation: Any, mode: GenerationMode) -> Any:
    """Cases as generated, and as many with path parameters naming things that exist."""
    known: dict[str, str] = {}
    path = operation.path
    if "{execution_id}" in path:
        known["execution_id"] = EXECUTION_ID
    if "{name}" in path:
        known["name"] = "api-free"
    generated = operation.as_strategy(generation_mode=mode)
    if not known:
        return generated
    return st.one_of(generated, operation.as_strategy(generation_mode=mode, path_parameters=known))


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_server_errors(api_schema: Any, mode: GenerationMode) -> None:
    failures: list[str] = []
    for operation in operations(api_schema):

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=strategy(operation, mode))
        def run(case: Any) -> None:
            # Django validates Host before any view runs (DisallowedHost, an HTML 400 from
            # the project's handler400): not something the API can answer, so not generated.
            if case.headers:
                case.headers = {k: v for k, v in case.headers.items() if k.lower() != "host"}
            case.call_and_validate(headers=AUTH, checks=CHECKS)

        try:
            run()
        except Exception as exc:
            failures.append(f"{operation.label}: {exc}")
    assert not failures, "\n\n".join(failures)
