"""Fixtures of the API tests: store definitions, users per permission level, clients."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from yieldstar_django.core.definition import StoreDefinition, define_store, unregister_store

COUNTER_SCHEMA = {
    "type": "object",
    "properties": {
        "count": {"type": "integer", "minimum": 0},
        "items": {"type": "array"},
    },
    "required": ["count"],
}


def private_hook(request: Any, action: str, store_id: str | None) -> bool:
    """Anyone with the model permission may view; only ids starting with ``open-`` change."""
    return action == "view" or (store_id is not None and store_id.startswith("open-"))


@pytest.fixture
def counter() -> Iterator[StoreDefinition]:
    definition = define_store(
        "api-counter", COUNTER_SCHEMA, initial=lambda id: {"count": 0, "items": []}
    )
    yield definition
    unregister_store(definition.name)


@pytest.fixture
def private() -> Iterator[StoreDefinition]:
    definition = define_store(
        "api-private", None, initial=lambda id: {"secret": 1}, permission=private_hook
    )
    yield definition
    unregister_store(definition.name)


@pytest.fixture
def hidden() -> Iterator[StoreDefinition]:
    definition = define_store(
        "api-hidden", None, initial=lambda id: {}, permission=lambda request, action, id: False
    )
    yield definition
    unregister_store(definition.name)


PERMISSIONS: dict[str, list[str]] = {
    "noperm": [],
    "view": ["view_storeinstance", "view_execution", "view_schedule"],
    "change": [
        "view_storeinstance",
        "change_storeinstance",
        "view_execution",
        "add_execution",
        "change_execution",
        "view_schedule",
        "add_schedule",
        "change_schedule",
        "trigger_schedule",
    ],
    "repair": [
        "view_storeinstance",
        "change_storeinstance",
        "view_execution",
        "add_execution",
        "change_execution",
        "retry_execution",
        "fork_execution",
        "view_schedule",
        "add_schedule",
        "change_schedule",
        "trigger_schedule",
    ],
}


def make_user(level: str) -> User:
    user = User.objects.create_user(level, password="pw")
    codenames = PERMISSIONS[level]
    if codenames:
        user.user_permissions.set(
            Permission.objects.filter(content_type__app_label="yieldstar", codename__in=codenames)
        )
    return user


@pytest.fixture
def client_for(db: None) -> Callable[[str], Client]:
    """``client_for(level)``: a test client logged in at ``level`` (``anonymous`` too)."""
    made: dict[str, Client] = {}

    def get(level: str) -> Client:
        if level not in made:
            client = Client()
            if level != "anonymous":
                client.force_login(make_user(level))
            made[level] = client
        return made[level]

    return get


@pytest.fixture
def api(client_for: Callable[[str], Client]) -> Client:
    """A client with every store and execution permission."""
    return client_for("change")


WAKES: list[Any] = []


def record_wakes(wakes: Any) -> None:
    """A ``WAKE_BACKEND`` that records instead of enqueueing Celery tasks."""
    WAKES.extend(wakes)


@pytest.fixture(autouse=True)
def _no_celery(settings: Any) -> Iterator[None]:
    settings.YIELDSTAR = {**settings.YIELDSTAR, "WAKE_BACKEND": record_wakes}
    WAKES.clear()
    yield
    WAKES.clear()
