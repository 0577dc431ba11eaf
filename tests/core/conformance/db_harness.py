"""The database harnesses of the conformance suite: ``postgres`` and ``sqlite``.

Each runs the suite against a :class:`~yieldstar_django.connector.DatabaseStoreClient` on a
real database, in a transactional test (so ``on_commit`` fires), with ``WAKE_BACKEND``
pointing at a collector that appends every delivered wake to ``harness.wakes``.

``make_harness(request, name)`` enables database access for the requesting test itself, so
the ``harness`` fixture needs no marks: it marks every DB-harness test of the session with
``django_db(transaction=True, databases=[alias])`` before the test databases are created,
and creates an alias's test database itself if they were created without it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connections
from django.test.utils import override_settings

from yieldstar_django.connector import DatabaseStoreClient
from yieldstar_django.core.definition import StoreDefinition
from yieldstar_django.core.results import StoreWaiter, Wake
from yieldstar_django.core.types import StorePath

#: Harness name -> database alias.
#: Harness name -> database alias. ``postgres-statements`` runs the portable statements path
#: (``use_functions=False``) on PostgreSQL, beside the one-call PL/pgSQL path of ``postgres``.
ALIASES = {"postgres": "default", "postgres-statements": "default", "sqlite": "sqlite"}


def _vendor(alias: str) -> str:
    engine = str(settings.DATABASES[alias]["ENGINE"])
    return "sqlite" if "sqlite" in engine else "postgresql"


class DatabaseHarness:
    """A fresh client on ``alias`` and what the protocol lets a test observe."""

    def __init__(self, name: str, alias: str) -> None:
        self.name = name
        self.alias = alias
        self.wakes: list[Wake] = []
        self.client = DatabaseStoreClient(alias, use_functions=name != "postgres-statements")
        self._settings: dict[str, Any] = {
            **getattr(settings, "YIELDSTAR", {}),
            "WAKE_BACKEND": self.collect,
            "VERSION_HISTORY_LIMIT": None,
        }

    def collect(self, wakes: Any) -> None:
        """The ``WAKE_BACKEND`` of the harness."""
        self.wakes.extend(Wake(w.execution_id, w.workflow_id) for w in wakes)

    def changed_paths(self, definition: StoreDefinition, id: str) -> list[tuple[StorePath, ...]]:
        with connections[self.alias].cursor() as cursor:
            cursor.execute(
                "SELECT changed_paths FROM yieldstar_storeversion "
                "WHERE store_name = %s AND store_id = %s AND version > 0 ORDER BY id",
                [definition.name, id],
            )
            return [tuple(tuple(p) for p in json.loads(text)) for (text,) in cursor.fetchall()]

    def waiters(self, definition: StoreDefinition, id: str) -> list[StoreWaiter]:
        return self.client.waiters(definition, id)

    @contextmanager
    def configure(self, **yieldstar: Any) -> Iterator[None]:
        """Apply ``YIELDSTAR`` settings; the client reads them on every call."""
        with override_settings(YIELDSTAR={**self._settings, **yieldstar}):
            yield

    @contextmanager
    def active(self) -> Iterator[None]:
        with override_settings(YIELDSTAR=self._settings):
            yield


def _is_test_database(alias: str) -> bool:
    name = str(connections[alias].settings_dict["NAME"])
    return Path(name).name.startswith("test_")


def _mark_session(request: pytest.FixtureRequest) -> None:
    """Mark every DB-harness test, so pytest-django's session setup creates their
    databases (it looks at the marks of all collected tests)."""
    session = request.session
    if getattr(session, "_yieldstar_db_harness_marked", False):
        return
    for item in session.items:
        callspec = getattr(item, "callspec", None)
        name = callspec.params.get("harness") if callspec else None
        if name in ALIASES:
            item.add_marker(
                pytest.mark.django_db(transaction=True, databases=[ALIASES[name]]), append=False
            )
    session._yieldstar_db_harness_marked = True  # type: ignore[attr-defined]


def _create_missing_database(request: pytest.FixtureRequest, alias: str) -> None:
    if _is_test_database(alias):
        return
    blocker = request.getfixturevalue("django_db_blocker")
    connection = connections[alias]
    original = connection.settings_dict["NAME"]
    with blocker.unblock():
        connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)

    def destroy() -> None:
        with blocker.unblock():
            connection.creation.destroy_test_db(original, verbosity=0)

    request.config.add_cleanup(destroy)


def make_harness(request: pytest.FixtureRequest, name: str) -> Iterator[DatabaseHarness]:
    """Yield a harness for ``name`` (a key of ``ALIASES``) for the current test."""
    alias = ALIASES[name]
    if name.startswith("postgres") and _vendor(alias) != "postgresql":
        pytest.skip("needs PostgreSQL; DATABASE_URL points at SQLite")
    _mark_session(request)
    if request.node.get_closest_marker("django_db") is None:
        request.applymarker(pytest.mark.django_db(transaction=True, databases=[alias]))
    request.getfixturevalue("django_db_setup")
    _create_missing_database(request, alias)
    request.getfixturevalue("_django_db_helper")
    harness = DatabaseHarness(name, alias)
    with harness.active():
        yield harness
