"""Concurrent ``POST executions/`` with one ``execution_id``: exactly one ``201``, the
others ``200`` (same arguments) or ``409`` (other arguments), on a real database."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User

from tests.shared.fixtures import Spawn
from yieldstar_django.models import Execution


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_concurrent_starts_tell_the_truth(spawn: Spawn) -> None:
    User.objects.create_superuser("racer", password="x")
    bodies = [
        json.dumps({"workflow": "api-test-greet", "execution_id": "race", "args": [name]})
        for name in ["ada", "bob"] * 4
    ]
    statuses = spawn("api_start", [("racer", body) for body in bodies])
    assert statuses.count(201) == 1, statuses
    execution = Execution.objects.get(pk="race")
    winner = execution.input["args"]
    for body, status in zip(bodies, statuses, strict=True):
        if status == 201:
            assert json.loads(body)["args"] == winner
        elif json.loads(body)["args"] == winner:
            assert status == 200, statuses
        else:
            assert status == 409, statuses
    assert Execution.objects.count() == 1
