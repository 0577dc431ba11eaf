"""Concurrent ``POST executions/`` with one ``execution_id``: exactly one ``201``, the
others ``200`` (same arguments) or ``409`` (other arguments), on a real database."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Permission, User

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


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_concurrent_starts_of_a_start_only_user_answer_it_and_no_one_else(spawn: Spawn) -> None:
    """Two start-only users (may add, may not view) start one ``execution_id`` with equal
    arguments at once, four requests each: exactly one request creates it (``201``); its
    user's other requests answer ``200``, the other user's ``409``, whichever order the
    processes commit in (the losers read ``started_by`` the winner committed)."""
    permission = Permission.objects.get(
        content_type__app_label="yieldstar", codename="add_execution"
    )
    for name in ("ann", "ben"):
        User.objects.create_user(name, password="x").user_permissions.add(permission)
    body = json.dumps({"workflow": "api-test-greet", "execution_id": "shared", "args": ["x"]})
    users = ["ann", "ben"] * 4
    statuses = spawn("api_start", [(name, body) for name in users])
    assert statuses.count(201) == 1, statuses
    winner = users[statuses.index(201)]
    for name, status in zip(users, statuses, strict=True):
        if name != winner:
            assert status == 409, statuses
        elif status != 201:
            assert status == 200, statuses
    assert Execution.objects.get(pk="shared").started_by == (
        f"http:{User.objects.get(username=winner).pk}"
    )
