"""Showing an admin page takes no write lock.

On SQLite with ``transaction_mode="IMMEDIATE"`` (the project's default) every transaction
begins ``BEGIN IMMEDIATE``: the database's one write lock. A GET or HEAD of an admin page
must not open one, else merely looking at a store waits behind every writer (and fails with
"database is locked" after the busy timeout) and blocks every writer while it renders.

The app's tables are routed to the file-based ``sqlite`` alias (as a project that keeps
yieldstar on its own database does; users and sessions stay on ``default``) and another
connection holds ``BEGIN IMMEDIATE`` on that file while the admin answers: each page must
answer well within the busy timeout. A POST of the state editor, a write, still waits for
the lock (and, the lock not coming, saves nothing).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.db import OperationalError, connections
from django.test import Client
from django.utils import timezone

from tests.shared import outside
from yieldstar_django.connector import get_store_client
from yieldstar_django.core.definition import StoreDefinition
from yieldstar_django.models import (
    ClaimLeaseRecord,
    Execution,
    ExecutionStep,
    IdempotencyKey,
    StoreInstance,
    WakeIntent,
)
from yieldstar_django.models.runtime import StepKind, StepStatus

ALIAS = "sqlite"

#: The busy timeout of the ``sqlite`` alias during these tests (seconds): a page that waits
#: for the write lock fails with "database is locked" after it.
BUSY_TIMEOUT = 3.0

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", ALIAS])


@pytest.fixture
def on_sqlite() -> Iterator[None]:
    """The app on the ``sqlite`` alias, whose busy timeout is :data:`BUSY_TIMEOUT`."""
    connection = connections[ALIAS]
    options = connection.settings_dict["OPTIONS"]
    saved = options["timeout"]
    connection.close()
    options["timeout"] = BUSY_TIMEOUT
    try:
        with outside.runtime_on(ALIAS):
            yield
    finally:
        connection.close()
        options["timeout"] = saved


@contextmanager
def write_lock_held() -> Iterator[None]:
    """Other connections hold the write lock (``BEGIN IMMEDIATE``) of every SQLite database
    the admin uses: ``sqlite``, and ``default`` too when it is SQLite (users, sessions)."""
    held: list[sqlite3.Connection] = []
    try:
        for alias in ("default", ALIAS):
            if connections[alias].vendor == "sqlite":
                other = sqlite3.connect(
                    connections[alias].settings_dict["NAME"], isolation_level=None
                )
                held.append(other)
                other.execute("BEGIN IMMEDIATE")
        yield
    finally:
        for other in held:
            other.close()  # rolls back


@pytest.fixture
def rows(on_sqlite: None, counters: StoreDefinition) -> dict[str, str]:
    """One row of each admin, on ``sqlite``: its change page's path."""
    store = get_store_client(ALIAS).update_store(
        counters, "s-1", updater=lambda draft: draft.update(count=1)
    )
    assert store.version >= 1
    instance = StoreInstance.objects.using(ALIAS).get(name=counters.name, store_id="s-1")
    execution = Execution.objects.using(ALIAS).create(
        id="locked-1", workflow_id="admin-flow", input_json='{"args":[],"kwargs":{}}'
    )
    ExecutionStep.objects.using(ALIAS).create(
        execution=execution,
        position=0,
        step_key="0",
        kind=StepKind.RUN,
        status=StepStatus.COMPLETED,
        value_json="1",
    )
    intent = WakeIntent.objects.using(ALIAS).create(
        execution_id=execution.id,
        workflow_id="admin-flow",
        reason="test",
        available_at=timezone.now(),
        created_at=timezone.now(),
    )
    lease = ClaimLeaseRecord.objects.using(ALIAS).create(
        id="locked-1/0",
        execution_id=execution.id,
        step_key="0",
        store_name=counters.name,
        store_id="s-1",
        value_json='"job"',
        expires_at=timezone.now() + timedelta(minutes=5),
    )
    key = IdempotencyKey.objects.using(ALIAS).create(
        principal="user:1", key="k-1", fingerprint="0" * 64, method="POST", target="/x"
    )
    return {
        "storeinstance": str(instance.pk),
        "execution": execution.id,
        "wakeintent": str(intent.pk),
        "claimleaserecord": lease.id,
        "idempotencykey": str(key.pk),
    }


def pages(rows: dict[str, str]) -> list[str]:
    """Every page of the app's admins a GET may ask for."""
    urls = ["/admin/", "/admin/yieldstar/"]
    for model, pk in rows.items():
        base = f"/admin/yieldstar/{model}/"
        page = f"{base}{quote(pk)}/"
        urls += [base, f"{base}add/", page, f"{page}change/", f"{page}history/", f"{page}delete/"]
    return urls


def answers(client: Client, method: str, url: str) -> int:
    """The status of the page; a failure if it waited for the write lock (held throughout,
    so such a wait ends in "database is locked" after ``BUSY_TIMEOUT``)."""
    try:
        response = getattr(client, method)(url)
    except OperationalError as exc:  # "database is locked": it waited for the write lock
        pytest.fail(f"{method.upper()} {url} waited for the write lock: {exc}")
    return response.status_code


@pytest.mark.parametrize("user", ["superuser", "viewer"])
@pytest.mark.parametrize("method", ["get", "head"])
def test_admin_pages_answer_while_another_connection_holds_the_write_lock(
    rows: dict[str, str], staff: Any, admin_client: Client, user: str, method: str
) -> None:
    client = admin_client if user == "superuser" else staff("viewer")
    for url in pages(rows):  # each answers before the lock is held (as it will under it)
        client.get(url)
    with write_lock_held():
        for url in pages(rows):
            status = answers(client, method, url)
            assert status in {200, 302, 403}, (url, status)


def test_the_store_page_with_its_editor_answers_under_the_lock(
    rows: dict[str, str], admin_client: Client
) -> None:
    url = f"/admin/yieldstar/storeinstance/{rows['storeinstance']}/change/"
    with write_lock_held():
        status = answers(admin_client, "get", url)

        body = admin_client.get(url).content.decode()
    assert status == 200
    assert 'name="state_json"' in body and 'name="expected_version"' in body


def test_a_post_of_the_editor_still_takes_the_write_lock(
    rows: dict[str, str], admin_client: Client, counters: StoreDefinition
) -> None:
    """A save is a write: under the held lock it waits, then fails, and writes nothing."""
    pk = rows["storeinstance"]
    url = f"/admin/yieldstar/storeinstance/{pk}/change/"
    instance = StoreInstance.objects.using(ALIAS).get(pk=pk)
    form = {
        "state_json": '{"count": 5, "tags": []}',
        "expected_instance_id": instance.instance_id,
        "expected_version": instance.version,
        "edit_token": "t" * 32,
    }
    with write_lock_held(), pytest.raises(OperationalError, match="locked"):
        admin_client.post(url, form)
    assert StoreInstance.objects.using(ALIAS).get(pk=pk).version == instance.version
    response = admin_client.post(url, form)
    assert response.status_code == 302
    assert StoreInstance.objects.using(ALIAS).get(pk=pk).value == {"count": 5, "tags": []}
