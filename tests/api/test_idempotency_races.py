"""``Idempotency-Key`` under concurrent requests: twin requests (the same request under the
same key, a client's retry while the first attempt is still running), each on its own
database connection, with the interleavings forced by events."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connections
from django.test import Client

from yieldstar_django.api import idempotency
from yieldstar_django.connector import get_store_client
from yieldstar_django.core.definition import StoreDefinition

from .test_stores import JSON, url, write

pytestmark = pytest.mark.django_db(transaction=True)

TIMEOUT = 30


@pytest.fixture
def login(django_user_model: Any) -> Callable[[], Client]:
    """``login()``: a new client of one user (each thread uses its own)."""
    django_user_model.objects.create_superuser("twin", password="pw")

    def new() -> Client:
        client = Client()
        client.login(username="twin", password="pw")
        return client

    return new


class InThread:
    """One request sent from its own thread (its own database connection)."""

    def __init__(self, send: Callable[[], Any]) -> None:
        self.response: Any = None
        self.error: BaseException | None = None

        def run() -> None:
            try:
                self.response = send()
            except BaseException as exc:  # pragma: no cover - reported by result()
                self.error = exc
            finally:
                connections.close_all()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def result(self) -> Any:
        self.thread.join(TIMEOUT)
        assert not self.thread.is_alive(), "the request hangs"
        if self.error is not None:
            raise self.error
        return self.response


@pytest.fixture
def paused(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], tuple[Any, Any]]]:
    """``paused(method)``: the first call of ``Claim.<method>`` waits (in whatever thread
    makes it) until the returned ``go`` event is set; ``reached`` is set when it waits."""
    gates: list[threading.Event] = []

    def pause(method: str) -> tuple[threading.Event, threading.Event]:
        original = getattr(idempotency.Claim, method)
        reached, go = threading.Event(), threading.Event()
        calls: list[int] = []
        gates.append(go)

        def waiting(self: Any, *args: Any) -> Any:
            calls.append(1)
            if len(calls) == 1:
                reached.set()
                assert go.wait(TIMEOUT), "never let go"
            return original(self, *args)

        monkeypatch.setattr(idempotency.Claim, method, waiting)
        return reached, go

    yield pause
    for go in gates:  # never leave a thread waiting
        go.set()


def test_a_failed_twin_does_not_free_a_key_its_twin_committed_under(
    counter: StoreDefinition, login: Callable[[], Client], paused: Any
) -> None:
    """A request (A) whose write failed (here a 412) releases the key it created. Its twin
    (B, the same request under the same key, found A's claim) committed meanwhile: the key
    is used, so another request under it must be refused with 422, not answered with B's
    recorded outcome as if it were its own."""
    client = get_store_client()
    created = client.get_store(counter, "s")
    condition = f'"{created.instance_id}:1"'  # the version the store is at only later
    reached, go = paused("release")
    headers = {"Idempotency-Key": "k", "If-Match": condition}
    first = InThread(lambda: write(login(), "PUT", {"count": 1, "items": []}, **headers))
    assert reached.wait(TIMEOUT)  # A saw version 0: 412, and is about to free the key
    client.update_store(counter, "s", updater=lambda d: d.update(count=5))  # version 1
    twin = write(login(), "PUT", {"count": 1, "items": []}, **headers)
    assert twin.status_code == 200, twin.content
    assert twin.json()["replayed"] is False  # B committed under the key
    go.set()
    assert first.result().status_code == 412
    other = write(login(), "PUT", {"count": 2, "items": []}, **{"Idempotency-Key": "k"})
    assert other.status_code == 422, other.json()
    assert other.json()["code"] == "idempotency_key_reused"
    retry = write(login(), "PUT", {"count": 1, "items": []}, **headers)
    assert retry.status_code == 200, retry.content
    assert retry.json() == {**twin.json(), "replayed": True}
    assert client.get_store(counter, "s").state == {"count": 1, "items": []}


def test_a_replay_while_the_twin_is_finishing_has_the_etag(
    counter: StoreDefinition, login: Callable[[], Client], paused: Any
) -> None:
    """A retry that arrives after its twin committed but before the twin recorded the
    store's instance on the key still answers with the ETag (as every replay does)."""
    reached, go = paused("remember_instance")
    body = [{"op": "add", "path": "/items/-", "value": 1}]
    patch = "application/json-patch+json"
    first = InThread(lambda: write(login(), "PATCH", body, patch, **{"Idempotency-Key": "k"}))
    assert reached.wait(TIMEOUT)  # committed, not yet remembered
    twin = write(login(), "PATCH", body, patch, **{"Idempotency-Key": "k"})
    go.set()
    original = first.result()
    assert original.status_code == twin.status_code == 200, twin.content
    assert twin.json() == {**original.json(), "replayed": True}
    assert twin.get("ETag") == original["ETag"]


def test_a_replay_after_the_first_request_died_has_the_etag(
    counter: StoreDefinition, login: Callable[[], Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first request committed and then lost its connection (or its process) before
    recording the store's instance on the key: its retries still answer with the ETag."""
    from django.db import OperationalError

    def cut(self: Any, instance_id: str | None) -> None:
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(idempotency.Claim, "remember_instance", cut)
    api = login()
    api.raise_request_exception = False
    died = write(api, "PUT", {"count": 3, "items": []}, JSON, **{"Idempotency-Key": "k"})
    assert died.status_code == 503  # database_unavailable: the client retries
    monkeypatch.undo()
    retry = write(login(), "PUT", {"count": 3, "items": []}, JSON, **{"Idempotency-Key": "k"})
    assert retry.status_code == 200, retry.content
    assert retry.json()["replayed"] is True
    snapshot = get_store_client().get_store(counter, "s")
    assert retry.json()["instance_id"] == snapshot.instance_id
    assert retry["ETag"] == f'"{snapshot.instance_id}:1"'


def test_twin_deletes_of_a_missing_store_leave_it_missing(
    counter: StoreDefinition, login: Callable[[], Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A DELETE under a key of a store that does not exist creates it and deletes it. Its
    twin, which found the store missing too, must not bring it back: both answer 204 and
    the store is missing afterwards."""
    client = get_store_client()
    original = type(client).insert_store
    reached, go = threading.Event(), threading.Event()
    twin_thread: list[threading.Thread] = []

    def insert(self: Any, *args: Any) -> Any:
        if threading.current_thread() in twin_thread:
            reached.set()
            assert go.wait(TIMEOUT), "never let go"
        return original(self, *args)

    monkeypatch.setattr(type(client), "insert_store", insert)
    try:
        twin = InThread(lambda: login().delete(url("gone"), headers={"Idempotency-Key": "d"}))
        twin_thread.append(twin.thread)
        assert reached.wait(TIMEOUT)  # the twin found neither the store nor the step
        first = login().delete(url("gone"), headers={"Idempotency-Key": "d"})
        assert first.status_code == 204
    finally:
        go.set()
    assert twin.result().status_code == 204
    monkeypatch.undo()
    assert login().get(url("gone")).status_code == 404
