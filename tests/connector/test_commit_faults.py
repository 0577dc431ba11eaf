"""Exactly-once under faults: a connection killed after its commit, a process killed
between its commit and its ``on_commit`` delivery."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from django.db import OperationalError, connections
from django.utils import timezone

from tests.shared.fixtures import POSTGRES, Spawn, WakeCollector, configure
from yieldstar_django.connector import DatabaseStoreClient
from yieldstar_django.core.definition import StoreDefinition
from yieldstar_django.core.results import StoreStepId, StoreWaiter, Wake
from yieldstar_django.models import StoreInstance, StoreVersion, WakeIntent
from yieldstar_django.wakes import relay_once

_names = itertools.count()


class KilledAfterCommit(DatabaseStoreClient):
    """Once armed, terminates its own backend right after a commit has gone through,
    then touches the dead connection, so the call fails although
    its transaction committed: what a client sees when the server or the network dies
    between the commit and the reply."""

    armed = False

    def _committed(self) -> None:
        if not self.armed:
            return
        self.armed = False
        # Its own server connection, which it may share with nobody at this point: behind
        # a transaction pooler the client's backend pid is the pooler's, not the server's.
        with self.connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")
            cursor.execute("SELECT 1")


@pytest.mark.parametrize("alias", [POSTGRES], indirect=True)
@pytest.mark.parametrize("use_functions", [True, False], ids=["function", "statements"])
@pytest.mark.parametrize("operation", ["update", "take"])
def test_connection_killed_after_commit_then_retried_applies_once(
    alias: str, wakes: WakeCollector, use_functions: bool, operation: str
) -> None:
    d = StoreDefinition(f"kill{next(_names)}", None, lambda id: {"n": 0, "items": ["a", "b"]})
    client = KilledAfterCommit(alias, use_functions=use_functions)
    client.get_store(d, "s")
    step = StoreStepId("exec", "step-1")

    def call() -> Any:
        if operation == "update":
            return client.update_store(
                d, "s", updater=lambda s: s.update(n=s["n"] + 1), step_id=step
            )
        return client.take_from_store(
            d,
            "s",
            selector=lambda s: s["items"][0] if s["items"] else None,
            claim=lambda draft, _: draft["items"].pop(0),
            step_id=step,
        )

    client.armed = True
    with pytest.raises(OperationalError):
        call()
    connections[alias].close()  # what Django does with a broken connection at request end

    retried = call()
    store = StoreInstance.objects.using(alias).get(name=d.name)
    assert store.version == 1, "the version moved once"
    if operation == "update":
        assert retried.state == {"n": 1, "items": ["a", "b"]}
        assert (retried.previous_version, retried.version) == (0, 1)
    else:
        assert (retried.selected, retried.version) == ("a", 1)
        assert store.value["items"] == ["b"]
    assert call() == retried, "every replay returns the recorded result verbatim"
    assert StoreVersion.objects.using(alias).filter(store_name=d.name).count() == 2


def test_process_killed_between_commit_and_on_commit_leaves_intents_for_the_relay(
    alias: str, spawn: Spawn, wakes: WakeCollector
) -> None:
    name = f"die{next(_names)}"
    spawn("commit_then_die", [(alias, name)], barrier=False, expect_exit=17)
    store = StoreInstance.objects.using(alias).get(name=name)
    assert store.value == {"jobs": ["job"], "other": 0}, "the change committed"
    intent = WakeIntent.objects.using(alias).get()
    assert (intent.execution_id, intent.delivered_at) == ("doomed", None)

    with configure(WAKE_BACKEND=wakes):
        assert relay_once(using=alias) == 0, "not due before RELAY_DELAY has passed"
        WakeIntent.objects.using(alias).update(available_at=intent.created_at)
        assert relay_once(using=alias) == 1
        assert relay_once(using=alias) == 0, "delivered once"
    assert wakes == [Wake("doomed", "wf")]
    left = WakeIntent.objects.using(alias).get()
    assert left.delivered_at is None, "acknowledged only by a run of the execution"
    assert left.available_at > timezone.now(), "delivered again later unless acknowledged"


def test_waiter_registered_in_a_rolled_back_transaction_does_not_exist(
    alias: str, wakes: WakeCollector
) -> None:
    """A registration joins the caller's transaction like every write."""
    from django.db import transaction

    d = StoreDefinition(f"rb{next(_names)}", None, lambda id: {"jobs": []})
    client = DatabaseStoreClient(alias)
    snap = client.get_store(d, "q")
    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        client.register_waiter(
            StoreWaiter("wf", "e", "k", d.name, "q", snap.instance_id, 99, [("jobs",)])
        )
        raise RuntimeError
    assert client.waiters(d, "q") == []
    assert wakes == [], "the stale wake was rolled back with the registration"
