"""Twin ``Idempotency-Key`` writes sent at the same moment from several processes (each its
own connection), on a real database: one commits, the others answer its outcome."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User

from tests.shared.fixtures import Spawn
from yieldstar_django import define_store
from yieldstar_django.connector import get_store_client
from yieldstar_django.core.definition import unregister_store


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_twin_writes_under_one_key_at_once_commit_once(spawn: Spawn) -> None:
    """The HTTP API page: "Twin requests may run at once: one commits, the others answer
    its outcome marked ``replayed: true``, with its ``ETag``." Five processes send the same
    JSON Patch (an append, which a second commit would apply again) under one key at the
    same moment: the item is appended once (version 1), exactly one answer is not a
    replay, and every answer is ``200`` with the same version and ``ETag``."""
    User.objects.create_superuser("twins", password="x")
    name = "api-twins"
    body = json.dumps([{"op": "add", "path": "/items/-", "value": "once"}])
    answers = spawn("api_patch_with_key", [("twins", name, "k-1", body)] * 5)
    assert [a["status"] for a in answers] == [200] * 5, answers
    assert sorted(a["body"]["replayed"] for a in answers) == [False] + [True] * 4, answers
    assert {a["body"]["version"] for a in answers} == {1}, answers
    assert len({a["etag"] for a in answers}) == 1, answers
    definition = define_store(name, None, initial=lambda id: {"items": []})
    try:
        snapshot = get_store_client().get_store(definition, "s")
    finally:
        unregister_store(name)
    assert (snapshot.state, snapshot.version) == ({"items": ["once"]}, 1)
