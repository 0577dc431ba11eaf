"""The largest integers the settings accept work where those settings are used: the
store commit's history limit (a PostgreSQL ``bigint`` parameter) and the API's body read."""

from __future__ import annotations

import io

import pytest

from tests.shared.fixtures import BOTH, configure
from yieldstar_django.api.parsers import read_limited
from yieldstar_django.conf import MAX_INTEGER
from yieldstar_django.connector import get_store_client
from yieldstar_django.core.definition import define_store, unregister_store


@pytest.mark.parametrize("alias", BOTH)
def test_the_largest_history_limit_commits(alias: str) -> None:
    definition = define_store("bounds-history", None, initial=lambda _id: {"n": 0})
    try:
        with configure(VERSION_HISTORY_LIMIT=MAX_INTEGER, DATABASE_ALIAS=alias):
            client = get_store_client(alias)
            for _ in range(2):
                client.update_store(definition, "i", updater=lambda s: {"n": s["n"] + 1})
            assert client.get_store(definition, "i").state == {"n": 2}
    finally:
        unregister_store("bounds-history")


@pytest.mark.parametrize("key", ["API_MAX_BODY_BYTES", "MAX_STATE_BYTES"])
def test_the_largest_body_limit_reads_a_body(key: str) -> None:
    with configure(**{key: MAX_INTEGER}):
        assert read_limited(io.BytesIO(b'{"a": 1}')) == b'{"a": 1}'
