"""Fixtures of the admin tests: a store definition, staff users per permission level."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from yieldstar_django.core.definition import StoreDefinition, define_store, unregister_store
from yieldstar_django.core.store import StoreClient

SCHEMA = {
    "type": "object",
    "properties": {"count": {"type": "integer", "minimum": 0}, "tags": {"type": "array"}},
    "required": ["count"],
}

LEVELS: dict[str, list[str]] = {
    "viewer": [
        "view_storeinstance",
        "view_execution",
        "view_wakeintent",
        "view_idempotencykey",
    ],
    "editor": [
        "view_storeinstance",
        "change_storeinstance",
        "view_execution",
        "change_execution",
        "view_wakeintent",
        "change_wakeintent",
        "view_idempotencykey",
    ],
}

WAKES: list[Any] = []


def record_wakes(wakes: Any) -> None:
    WAKES.extend(wakes)


@pytest.fixture(autouse=True)
def _recorded_wakes(settings: Any) -> Iterator[list[Any]]:
    settings.YIELDSTAR = {**settings.YIELDSTAR, "WAKE_BACKEND": record_wakes}
    WAKES.clear()
    yield WAKES
    WAKES.clear()


@pytest.fixture
def wakes() -> list[Any]:
    return WAKES


@pytest.fixture
def counters() -> Iterator[StoreDefinition]:
    definition = define_store("admin-counter", SCHEMA, initial=lambda id: {"count": 0, "tags": []})
    yield definition
    unregister_store(definition.name)


@pytest.fixture
def store_client(db: None) -> StoreClient:
    from yieldstar_django.connector import get_store_client

    return get_store_client()


@pytest.fixture
def staff(db: None) -> Callable[[str], Client]:
    """``staff(level)``: a logged-in client of a staff user at ``viewer`` or ``editor``."""

    def make(level: str) -> Client:
        user = User.objects.create_user(level, password="pw", is_staff=True)
        user.user_permissions.set(
            Permission.objects.filter(
                content_type__app_label="yieldstar", codename__in=LEVELS[level]
            )
        )
        client = Client()
        client.force_login(user)
        return client

    return make


def count_queries(client: Client, url: str) -> tuple[int, str]:
    """GET ``url`` (it must answer 200): the number of queries it made, and the page."""
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200
    return len(queries), response.content.decode()


class ConfirmForm(HTMLParser):
    """The fields a browser sends from a confirmation page's form: its hidden inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        name = found.get("name")
        if tag == "input" and found.get("type") == "hidden" and name:
            self.fields.append((name, found.get("value") or ""))


def confirm_fields(html: str) -> dict[str, list[str]]:
    """The confirmation form's hidden fields, as the test client posts them."""
    parser = ConfirmForm()
    parser.feed(html)
    fields: dict[str, list[str]] = {}
    for name, value in parser.fields:
        fields.setdefault(name, []).append(value)
    return fields
