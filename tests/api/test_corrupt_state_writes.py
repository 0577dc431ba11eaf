"""Writes to a store whose stored state does not decode (a row written by hand, or by
another program writing the tables): the core raises ``CorruptStateError`` where it
decodes the stored text, and the API answers its JSON ``500 corrupt_row``, logging which
store, instead of Django's HTML error page. The row is left as it was."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from yieldstar_django.core.definition import StoreDefinition
from yieldstar_django.models import StoreInstance

from .test_corrupt_rows import CORRUPT, IDS, assert_corrupt_row
from .test_stores import JSON, MERGE, create, write

pytestmark = pytest.mark.django_db

JSON_PATCH = "application/json-patch+json"

WRITES = [
    pytest.param("PUT", {"count": 1}, JSON, {}, id="PUT"),
    pytest.param("PUT", {"count": 1}, JSON, {"If-Match": "*"}, id="PUT-if-match-any"),
    pytest.param("PATCH", {"count": 1}, MERGE, {}, id="PATCH-merge"),
    pytest.param(
        "PATCH", [{"op": "replace", "path": "/count", "value": 1}], JSON_PATCH, {}, id="PATCH-json"
    ),
]


@pytest.mark.parametrize("text", CORRUPT, ids=IDS)
@pytest.mark.parametrize(("method", "body", "media_type", "headers"), WRITES)
def test_a_write_to_a_store_whose_state_does_not_decode_is_a_coded_500(
    api: Client,
    counter: StoreDefinition,
    caplog: pytest.LogCaptureFixture,
    text: str,
    method: str,
    body: Any,
    media_type: str,
    headers: dict[str, str],
) -> None:
    create()
    StoreInstance.objects.filter(name=counter.name, store_id="s").update(state=text)
    response = write(api, method, body, media_type, **headers)
    assert_corrupt_row(response, caplog, "api-counter", "'s'")
    row = StoreInstance.objects.get(name=counter.name, store_id="s")
    assert (row.state, row.version) == (text, 0), "nothing was written"


def test_a_write_under_an_idempotency_key_that_meets_a_corrupt_state_leaves_the_key_free(
    api: Client, counter: StoreDefinition, caplog: pytest.LogCaptureFixture
) -> None:
    """As every write that proves it did not commit: the key's claim is released, so once
    the row is repaired another request may use the key (not ``422
    idempotency_key_reused``)."""
    create()
    StoreInstance.objects.filter(name=counter.name, store_id="s").update(state="{")
    first = write(api, "PUT", {"count": 1}, JSON, **{"Idempotency-Key": "k"})
    assert_corrupt_row(first, caplog, "api-counter", "'s'")
    StoreInstance.objects.filter(name=counter.name, store_id="s").update(state='{"count":0}')
    corrected = write(api, "PUT", {"count": 2}, JSON, **{"Idempotency-Key": "k"})
    assert corrected.status_code == 200, corrected.content
    assert corrected.json()["state"] == {"count": 2}
