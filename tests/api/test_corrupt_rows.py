"""Rows whose JSON text does not decode (written by hand, or by another program writing
the tables): the API answers its JSON error format, ``500 corrupt_row`` (the server's
data is at fault, not the request), and logs which row, instead of raising."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from yieldstar_django.core.definition import StoreDefinition
from yieldstar_django.models import Execution, ExecutionStep, StoreInstance
from yieldstar_django.runtime import start_workflow

from . import workflows  # noqa: F401  (registers api-test-greet)
from .test_stores import create, url

pytestmark = pytest.mark.django_db

#: Texts ``decode_durable`` refuses: cut short, a constant JSON has not, an integer past
#: Python's 4,300 digits, nesting past the recursion limit.
CORRUPT = ['{"count": 1, "ta', "NaN", "9" * 5000, "[" * 100_000 + "]" * 100_000]
IDS = ["truncated", "nan", "huge-int", "deep"]


def assert_corrupt_row(response: Any, caplog: pytest.LogCaptureFixture, *named: str) -> None:
    """A JSON ``500 corrupt_row``, and an error logged naming the row (``named``)."""
    assert response.status_code == 500, response.content
    assert response["Content-Type"] == "application/json"
    assert response.json()["code"] == "corrupt_row"
    logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any(all(name in message for name in named) for message in logged), logged


@pytest.mark.parametrize("text", CORRUPT, ids=IDS)
def test_a_store_whose_state_does_not_decode_is_a_coded_500(
    api: Client, counter: StoreDefinition, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    create()
    StoreInstance.objects.filter(name=counter.name, store_id="s").update(state=text)
    assert_corrupt_row(api.get(url()), caplog, "api-counter", "'s'")
    # Preconditions need no decoding: they are answered as before.
    etag = str(api.get(url(), headers={"If-Match": '"x:0"'})["ETag"])
    assert api.get(url(), headers={"If-None-Match": etag}).status_code == 304
    assert StoreInstance.objects.get(name=counter.name, store_id="s").state == text


@pytest.mark.parametrize("text", CORRUPT, ids=IDS)
@pytest.mark.parametrize(
    "column", ["input_json", "result_json", "error_json", "step value_json", "step error_json"]
)
def test_an_execution_whose_json_does_not_decode_is_a_coded_500(
    api: Client, text: str, column: str, caplog: pytest.LogCaptureFixture
) -> None:
    start_workflow("api-test-greet", "x", execution_id="corrupt")
    if column.startswith("step "):
        ExecutionStep.objects.create(
            execution=Execution.objects.get(pk="corrupt"), step_key="0", position=0,
            kind="run", status="completed", **{column.removeprefix("step "): text},
        )  # fmt: skip
    else:
        Execution.objects.filter(pk="corrupt").update(**{column: text})
    detail = reverse("yieldstar:execution-detail", args=["corrupt"])
    assert_corrupt_row(api.get(detail), caplog, "'corrupt'", column.removeprefix("step "))
    listed = api.get(reverse("yieldstar:execution-list"))
    assert listed.status_code == 200
    assert [e["id"] for e in listed.json()["results"]] == ["corrupt"]
