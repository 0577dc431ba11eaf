"""Code that runs in the child processes of the ``spawn`` fixture, each with its own
connection.


Children are started with the ``spawn`` method, so nothing is inherited: :func:`entry`
points the database aliases at the test databases the parent created, applies
``YIELDSTAR`` settings and calls ``django.setup()`` before anything touches Django. Store
definitions are rebuilt here by name (lambdas do not cross processes). Nothing in this
module imports Django at import time.
"""

from __future__ import annotations

import os
import random
import time
import traceback
from collections.abc import Callable
from typing import Any

from tests.polling import HANG_SECONDS

DISCARDED: list[Any] = []


def discard_wakes(wakes: Any) -> None:
    """A ``WAKE_BACKEND`` for children: the intents in the database are what tests check."""
    DISCARDED.extend(wakes)


def api_start(username: str, body: str) -> int:
    """``POST /yieldstar/executions/`` as ``username``; the response's status code."""
    from django.contrib.auth.models import User
    from django.test import Client

    from tests.api import workflows  # noqa: F401  (registers api-test-greet)

    client = Client()
    client.force_login(User.objects.get(username=username))
    response = client.post("/yieldstar/executions/", body, content_type="application/json")
    return response.status_code


def api_patch_with_key(username: str, name: str, key: str, body: str) -> dict[str, Any]:
    """``PATCH /yieldstar/stores/<name>/s/`` (a JSON Patch) as ``username`` under the
    ``Idempotency-Key`` ``key``; the response's status, body and ``ETag``."""
    from django.contrib.auth.models import User
    from django.test import Client

    from yieldstar_django import define_store

    define_store(name, None, initial=lambda id: {"items": []})
    client = Client()
    client.force_login(User.objects.get(username=username))
    response = client.patch(
        f"/yieldstar/stores/{name}/s/",
        body,
        content_type="application/json-patch+json",
        headers={"Idempotency-Key": key},
    )
    return {"status": response.status_code, "body": response.json(), "etag": response["ETag"]}


def setup_django(db_names: dict[str, str], yieldstar: dict[str, Any]) -> None:
    """Point every alias at ``db_names`` and apply ``yieldstar``, before any query. Works
    in a fresh interpreter and in a fork of one that has set Django up already."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django
    from django.apps import apps
    from django.conf import settings
    from django.db import connections

    for alias, name in db_names.items():
        settings.DATABASES[alias]["NAME"] = name
        assert connections[alias].connection is None, "no connection before setup"
    settings.YIELDSTAR = {"WAKE_BACKEND": f"{__name__}.discard_wakes", **yieldstar}
    if not apps.ready:
        django.setup()
    from yieldstar_django.conf import yieldstar_settings

    yieldstar_settings.reload()


def entry(
    function: str,
    db_names: dict[str, str],
    yieldstar: dict[str, Any],
    barrier: Any,
    results: Any,
    index: int,
    args: tuple[Any, ...],
) -> None:
    """Process target: set up Django, wait at ``barrier``, run ``function(*args)`` and put
    ``(index, "ok", result)`` or ``(index, "error", traceback)`` on ``results``."""
    try:
        setup_django(db_names, yieldstar)
        fn: Callable[..., Any] = globals()[function]
        if barrier is not None:
            barrier.wait(timeout=120)
        result = fn(*args)
        results.put((index, "ok", result))
    except BaseException:
        results.put((index, "error", traceback.format_exc()))
    finally:
        from django.db import connections

        connections.close_all()


def _definition(name: str, kind: str) -> Any:
    from yieldstar_django.core.definition import StoreDefinition

    initials: dict[str, Callable[[str], Any]] = {
        "counter": lambda id: {"n": 0},
        "queue": lambda id: {"items": [{"id": i, "owner": None} for i in range(100)]},
        "touch": lambda id: {"pid": os.getpid()},
        "slots": lambda id: {},
        "jobs": lambda id: {"jobs": [], "other": 0},
    }
    return StoreDefinition(name, None, initials[kind])


def _client(alias: str, use_functions: bool | None = None) -> Any:
    from yieldstar_django.connector import DatabaseStoreClient

    return DatabaseStoreClient(alias, use_functions=use_functions)


# --- races ------------------------------------------------------------------------------


def increment(alias: str, name: str, count: int, use_functions: bool | None) -> int:
    """``count`` increments of the counter; returns the commit attempts it took."""
    client = _client(alias, use_functions)
    definition = _definition(name, "counter")
    for _ in range(count):
        client.update_store(definition, "c", updater=lambda s: s.update(n=s["n"] + 1))
    return int(client.commit_attempts)


def take_all(alias: str, name: str, worker: int, use_functions: bool | None) -> list[int]:
    """Claim queue items until none is left; returns the ids this worker claimed."""
    client = _client(alias, use_functions)
    definition = _definition(name, "queue")

    def first_free(state: Any) -> Any:
        for item in state["items"]:
            if item["owner"] is None:
                return item
        return None

    def claim(draft: Any, item: Any) -> None:
        item["owner"] = worker

    claimed: list[int] = []
    while True:
        result = client.take_from_store(definition, "q", selector=first_free, claim=claim)
        if not result.matched:
            return claimed
        claimed.append(result.selected["id"])


def first_touch(alias: str, name: str) -> str:
    """Touch a missing store; returns the instance id this process saw."""
    client = _client(alias)
    return str(client.get_store(_definition(name, "touch"), "t").instance_id)


def race_waiter(
    alias: str, name: str, trials: int, barrier: Any, seed: int, use_functions: bool | None = None
) -> list[int]:
    """Per trial: take ``k<t>`` (unmatched unless the mutator was first) and register a
    waiter for execution ``e<t>`` (with ``use_functions=False``, by the portable
    statements); returns the trials that registered a waiter."""
    from yieldstar_django.core.results import StoreWaiter

    client = _client(alias, use_functions)
    definition = _definition(name, "slots")
    rng = random.Random(seed)
    waited: list[int] = []
    for trial in range(trials):
        key = f"k{trial}"
        barrier.wait(timeout=60)
        _jitter(rng, 0.001)
        result = client.take_from_store(
            definition, "race", selector=lambda s, key=key: s.get(key), claim=None
        )
        if result.matched:
            continue
        _jitter(rng)
        client.register_waiter(
            StoreWaiter(
                "wf",
                f"e{trial}",
                "take",
                name,
                "race",
                result.instance_id,
                result.version,
                result.read_paths,
            )
        )
        waited.append(trial)
    return waited


def race_mutator(alias: str, name: str, trials: int, barrier: Any, seed: int) -> int:
    """Per trial: write ``k<t>``."""
    client = _client(alias)
    definition = _definition(name, "slots")
    rng = random.Random(seed)
    for trial in range(trials):
        key = f"k{trial}"
        barrier.wait(timeout=60)
        _jitter(rng)
        client.update_store(definition, "race", updater=lambda s, key=key: s.update({key: 1}))
    return trials


def queue_takers(
    alias: str, name: str, executions: list[str], seconds: float, cohort: bool = False
) -> dict[str, Any]:
    """Act as ``executions``, each waiting to pop one item of the ``jobs`` queue as the
    runtime does: take; on a miss register a waiter (from what the take saw; in the
    selector's cohort with ``cohort``, as a runtime take does) and sleep until a wake
    intent newer than the take arrives (a resume), then take again; on a match remove the
    waiter. Returns each execution's item and resume count; one still waiting after
    ``seconds`` has lost its wake (``None`` item)."""
    from django.db import connections

    from yieldstar_django.core.cohorts import selector_cohort
    from yieldstar_django.core.results import StoreStepId, StoreWaiter

    client = _client(alias)
    definition = _definition(name, "jobs")

    def pop(draft: Any, job: Any) -> None:
        draft["jobs"].remove(job)

    def first(state: Any) -> Any:
        return state["jobs"][0] if state["jobs"] else None

    in_cohort = selector_cohort(first) if cohort else None

    def last_intent(execution: str) -> int:
        with connections[alias].cursor() as cursor:
            cursor.execute(
                "SELECT coalesce(max(id), 0) FROM yieldstar_wakeintent WHERE execution_id = %s",
                [execution],
            )
            return int(cursor.fetchone()[0])

    items: dict[str, Any] = {}
    resumes = dict.fromkeys(executions, 0)
    waiting: dict[str, int] = {}  # execution -> the newest intent before its take
    to_run = list(executions)
    deadline = time.monotonic() + seconds
    while (to_run or waiting) and time.monotonic() < deadline:
        for execution in to_run:
            seen = last_intent(execution)
            result = client.take_from_store(
                definition,
                "q",
                selector=first,
                claim=pop,
                step_id=StoreStepId(execution, "take"),
            )
            if result.matched:
                client.remove_waiters(execution, "take")
                items[execution] = result.selected
                continue
            waiter = ("wf", execution, "take", name, "q", result.instance_id, result.version)
            client.register_waiter(StoreWaiter(*waiter, result.read_paths, in_cohort))
            waiting[execution] = seen
        to_run = [e for e, seen in waiting.items() if last_intent(e) > seen]
        for execution in to_run:
            del waiting[execution]
            resumes[execution] += 1
        time.sleep(0.002)
    return {"items": {e: items.get(e) for e in executions}, "resumes": resumes}


def queue_producer(
    alias: str, name: str, batches: list[int], pause: float, settle: bool = False
) -> int:
    """Push ``batches`` of jobs (one commit each) once every taker waits, ``pause`` apart;
    with ``settle``, each once the jobs before it are taken and every taker still waiting
    has registered again (no waiter woken)."""
    from django.db import connections

    client = _client(alias)
    definition = _definition(name, "jobs")
    takers = sum(batches)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT count(*) FROM yieldstar_waiter")
            if cursor.fetchone()[0] >= takers:
                break
        time.sleep(0.005)

    def settled(taken: int) -> bool:
        with connections[alias].cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FILTER (WHERE woken_at IS NULL), count(*) FROM yieldstar_waiter"
            )
            unwoken, waiting = cursor.fetchone()
        return unwoken == waiting == takers - taken

    pushed = 0
    for size in batches:
        while settle and not settled(pushed) and time.monotonic() < deadline + 60:
            time.sleep(0.005)
        jobs = list(range(pushed, pushed + size))
        client.update_store(definition, "q", updater=lambda s, jobs=jobs: s["jobs"].extend(jobs))
        pushed += size
        time.sleep(pause)
    return pushed


def _jitter(rng: random.Random, most: float = 0.0004) -> None:
    """Busy-wait up to ``most`` seconds, so either side may go first."""
    deadline = time.perf_counter() + rng.random() * most
    while time.perf_counter() < deadline:
        pass


# --- faults -----------------------------------------------------------------------------


def _waiting_for_a_job(alias: str, name: str, execution_id: str, step_key: str) -> Any:
    """Store ``q`` of ``name`` (a ``jobs`` list) and a waiter of ``execution_id`` (step
    ``step_key``) registered on it from a take that found no job; returns the client and
    the definition."""
    from yieldstar_django.core.results import StoreWaiter

    client = _client(alias)
    definition = _definition(name, "jobs")
    result = client.take_from_store(
        definition, "q", selector=lambda s: s["jobs"][0] if s["jobs"] else None, claim=None
    )
    waiter = (execution_id, step_key, name, "q", result.instance_id, result.version)
    client.register_waiter(StoreWaiter("wf", *waiter, result.read_paths))
    return client, definition


def commit_then_die(alias: str, name: str) -> None:
    """Register a waiter, then commit an intersecting change and die in an ``on_commit``
    hook that runs before the connector's delivery hook."""
    from django.db import transaction

    client, definition = _waiting_for_a_job(alias, name, "doomed", "take")
    with transaction.atomic(using=alias):
        transaction.on_commit(lambda: os._exit(17), using=alias)
        client.update_store(definition, "q", updater=lambda s: s["jobs"].append("job"))
    raise AssertionError("on_commit did not run")  # pragma: no cover


def die_in_backend(wakes: Any) -> None:
    """A ``WAKE_BACKEND`` whose process dies while it publishes (exit code 19)."""
    os._exit(19)


def relay_then_die(alias: str) -> None:
    """One relay round whose backend is :func:`die_in_backend`: the relay process dies
    between its claim and its publish."""
    from yieldstar_django.wakes import relay_once

    relay_once(using=alias)
    raise AssertionError("the backend did not kill the relay")  # pragma: no cover


# --- retention ------------------------------------------------------------------------------


def prune(alias: str, batch_size: int, barrier: Any) -> int:
    """Prune finished executions (older than a day) while others do; returns how many."""
    from yieldstar_django.retention import prune_finished

    barrier.wait()
    return prune_finished(older_than=24 * 3600.0, batch_size=batch_size, using=alias).executions


def replay_steps(alias: str, name: str, ids: list[str], barrier: Any) -> int:
    """Replay each execution's recorded step on the counter while pruners run; returns
    how many replays re-applied their updater (must be none)."""
    from yieldstar_django.core.results import StoreStepId

    client = _client(alias)
    definition = _definition(name, "counter")
    barrier.wait()
    reapplied = 0
    for _ in range(3):
        for id in ids:
            result = client.update_store(
                definition, "c", updater=lambda s: s.update(n=-1), step_id=StoreStepId(id, "u")
            )
            reapplied += result.state == {"n": -1}
    return reapplied


# --- Celery configurations -----------------------------------------------------------


def _wake_one(alias: str, name: str) -> float:
    """Make execution ``e`` wait for a job in store ``name``, then push one (the commit
    wakes ``e`` through ``WAKE_BACKEND``); return the seconds the waking commit took."""
    client, definition = _waiting_for_a_job(alias, name, "e", "k")
    started = time.monotonic()
    client.update_store(definition, "q", updater=lambda s: s["jobs"].append("j"))
    return time.monotonic() - started


def wake_with_project_app(
    alias: str,
    name: str,
    broker_url: str,
    query_on_publish: bool,
    conf: dict[str, Any] | None = None,
) -> float:
    """A project's Celery app (``config_from_object``, as the docs show, then ``conf``) on
    ``broker_url``; with ``query_on_publish`` it has a ``before_task_publish`` receiver that
    reads the database (an audit row, say). Returns what :func:`_wake_one` returns."""
    from celery import Celery
    from celery.signals import before_task_publish
    from django.db import connections

    os.environ["CELERY_BROKER_URL"] = broker_url
    app = Celery("proj")
    app.config_from_object("django.conf:settings", namespace="CELERY")
    app.conf.update(conf or {})
    app.set_default()

    def audit(**kwargs: Any) -> None:
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT 1")

    if query_on_publish:
        before_task_publish.connect(audit, weak=False)
    return _wake_one(alias, name)


# --- SQLite under several processes ---------------------------------------------------------


def hold_write_lock(alias: str, name: str, barrier: Any) -> None:
    """Update the counter in a transaction kept open (a slow ``atomic`` block of a
    project's) until the reader is done; meet ``barrier`` once the write lock is held."""
    from django.db import transaction

    client = _client(alias)
    definition = _definition(name, "counter")
    barrier.wait(timeout=HANG_SECONDS)  # the reader is ready
    with transaction.atomic(using=alias):
        client.update_store(definition, "c", updater=lambda s: s.update(n=s["n"] + 1))
        barrier.wait(timeout=HANG_SECONDS)
        barrier.wait(timeout=4 * HANG_SECONDS)  # the reader is done


def timed_reads(alias: str, name: str, barrier: Any) -> dict[str, Any]:
    """Once a writer holds the lock: read the counter through the client, the HTTP API and
    the admin's lists; each read's seconds and status."""
    from django.contrib.auth.models import User
    from django.test import Client

    from yieldstar_django import define_store

    define_store(name, None, initial=lambda id: {"n": 0})
    client = Client()
    client.force_login(User.objects.get(username=f"reader-{name}"))
    barrier.wait(timeout=HANG_SECONDS)
    barrier.wait(timeout=HANG_SECONDS)  # the writer holds the lock
    out: dict[str, Any] = {}
    started = time.monotonic()
    missing = _client(alias).read_store(_definition(name, "counter"), "c") is None
    out["client"] = (round(time.monotonic() - started, 3), 404 if missing else 200)
    for label, url in [
        ("api-get", f"/yieldstar/stores/{name}/c/"),
        ("api-ids", f"/yieldstar/stores/{name}/"),
        ("admin-stores", "/admin/yieldstar/storeinstance/"),
        ("admin-executions", "/admin/yieldstar/execution/"),
    ]:
        started = time.monotonic()
        try:
            status: Any = client.get(url).status_code
        except Exception as exc:
            status = f"{type(exc).__qualname__}: {exc}"
        out[label] = (round(time.monotonic() - started, 3), status)
    barrier.wait(timeout=4 * HANG_SECONDS)  # the writer may commit now
    return out


def increment_until_killed(alias: str, name: str, padding: int) -> None:
    """Increment the counter (with a ``padding``-character string, so that a commit writes
    several pages) until killed; a commit of this process is in flight most of the time."""
    from yieldstar_django.core.definition import StoreDefinition

    client = _client(alias)
    definition = StoreDefinition(name, None, lambda id: {"n": 0, "pad": ""})
    while True:
        client.update_store(
            definition,
            "c",
            updater=lambda s: s.update(n=s["n"] + 1, pad=str(s["n"] % 10) * padding),
        )


def die_inside_commit(alias: str, name: str) -> None:
    """Increment the counter and get SIGKILLed inside the commit's transaction, after its
    state, version row and wake intents were written and before ``COMMIT``."""
    import signal

    from yieldstar_django.connector import portable

    client, definition = _waiting_for_a_job(alias, name, "doomed", "take")
    original = portable.write_intents

    def write_then_die(*args: Any, **kwargs: Any) -> Any:
        written = original(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)
        return written  # pragma: no cover

    portable.write_intents = write_then_die  # type: ignore[assignment]
    client.update_store(definition, "q", updater=lambda s: s["jobs"].append("job"))
    raise AssertionError("the commit did not die")  # pragma: no cover


def increment_jobs(alias: str, name: str) -> None:
    """Append a job to store ``q`` of ``name``."""
    client = _client(alias)
    client.update_store(_definition(name, "jobs"), "q", updater=lambda s: s["jobs"].append("job"))


def take_steps(alias: str, name: str, keys: list[str], seed: int) -> dict[str, Any]:
    """Take one queue item per step key of execution ``e`` (the keys in a random order);
    every process runs every key, as retried steps do. The item each key got."""
    from yieldstar_django.core.results import StoreStepId

    client = _client(alias)
    definition = _definition(name, "queue")
    rng = random.Random(seed)
    order = list(keys)
    rng.shuffle(order)

    def first_free(state: Any) -> Any:
        return next((item for item in state["items"] if item["owner"] is None), None)

    def claim(draft: Any, item: Any) -> None:
        item["owner"] = seed

    got: dict[str, Any] = {}
    for key in order:
        result = client.take_from_store(
            definition, "q", selector=first_free, claim=claim, step_id=StoreStepId("e", key)
        )
        got[key] = result.selected["id"] if result.matched else None
    return got


# --- registration versus deletion -----------------------------------------------------------


def race_delete_waiter(
    alias: str, name: str, trials: int, barrier: Any, seed: int, use_functions: bool | None
) -> list[tuple[int, str]]:
    """Per trial: take from store ``s<t>`` (never matched: it holds no ``go``) and register
    a waiter for execution ``e<t>`` on what the take saw, while another process deletes the
    store. Returns each trial's (trial, instance id the waiter observed)."""
    from yieldstar_django.core.results import StoreWaiter

    client = _client(alias, use_functions)
    definition = _definition(name, "slots")
    rng = random.Random(seed)
    waited: list[tuple[int, str]] = []
    for trial in range(trials):
        store_id = f"s{trial}"
        barrier.wait(timeout=60)
        _jitter(rng, 0.001)
        result = client.take_from_store(
            definition, store_id, selector=lambda s: s.get("go"), claim=None
        )
        assert not result.matched
        _jitter(rng, 0.002)
        client.register_waiter(
            StoreWaiter(
                "wf",
                f"e{trial}",
                "take",
                name,
                store_id,
                result.instance_id,
                result.version,
                result.read_paths,
            )
        )
        waited.append((trial, str(result.instance_id)))
    return waited


def race_deleter(
    alias: str, name: str, trials: int, barrier: Any, seed: int, use_functions: bool | None
) -> int:
    """Per trial: delete store ``s<t>`` (a no-op while it is missing)."""
    client = _client(alias, use_functions)
    definition = _definition(name, "slots")
    rng = random.Random(seed)
    for trial in range(trials):
        barrier.wait(timeout=60)
        _jitter(rng, 0.005)
        client.delete_store(definition, f"s{trial}")
    return trials


# --- dead letters and idle stores ----------------------------------------------------------


def _put_back(draft: Any, value: Any) -> None:
    draft["items"].append(value)


def _bury(draft: Any, value: Any) -> None:
    draft["dead"].append(value)


def dead_letter_store(name: str) -> Any:
    """The store ``name`` (registered) of the dead-letter races: ``release`` appends to
    ``items``, and a value's second expiry goes to ``dead``."""
    from yieldstar_django.core.definition import define_store

    return define_store(
        name,
        None,
        initial=lambda id: {"items": [], "dead": []},
        release=_put_back,
        max_deliveries=2,
        dead_letter=_bury,
    )


def expire_leases(alias: str, name: str) -> int:
    """Expire every due lease (of the :func:`dead_letter_store` ``name``) while other
    processes do; returns how many this one ended."""
    from datetime import timedelta

    from django.utils import timezone

    from yieldstar_django.runtime.claim_leases import expire_due

    dead_letter_store(name)
    now = timezone.now() + timedelta(hours=1)
    return expire_due(now=now, client=_client(alias)) + expire_due(now=now, client=_client(alias))


# --- runtime races ------------------------------------------------------------------------


def start_same_id(alias: str, workflow_id: str, execution_id: str, arg: str) -> str:
    """``start_execution(workflow_id, [arg], execution_id=...)``: ``"created"``,
    ``"existing"`` or, when it raised ``ExecutionConflictError``, what differed
    (``"refused workflow"``, ``"refused arguments"``)."""
    from tests.shared import race_workflows  # noqa: F401  (registers the workflows)
    from tests.shared.outside import runtime_on
    from yieldstar_django.runtime.errors import ExecutionConflictError
    from yieldstar_django.runtime.executions import start_execution

    with runtime_on(alias):
        try:
            new_id, created = start_execution(workflow_id, [arg], {}, execution_id=execution_id)
        except ExecutionConflictError as exc:
            assert exc.execution_id == execution_id, exc
            return f"refused {exc.conflict}"
    assert new_id == execution_id
    return "created" if created else "existing"


def run_paused_then_expired(alias: str, execution_id: str, barrier: Any) -> str:
    """Run the execution; at its ``PAUSE`` (first call: an update's updater, an atomic
    step's function), let the lease expire (as a
    worker paused past its lease) and meet ``barrier`` twice: once so that the other
    process takes the lease over, once when that process is in its own updater. Then go
    on and commit. Returns ``run_execution``'s result."""
    import threading
    from datetime import timedelta

    from django.db import connections
    from django.utils import timezone

    from tests.shared import race_workflows
    from tests.shared.outside import runtime_on
    from yieldstar_django.models import Execution
    from yieldstar_django.runtime import executions
    from yieldstar_django.runtime.leases import Lease, acquire_lease

    held: list[Lease] = []

    def acquire(eid: str) -> Lease | None:
        lease = acquire_lease(eid)
        if lease is not None:
            held.append(lease)
        return lease

    def expire() -> None:
        try:
            expired = timezone.now() - timedelta(seconds=1)
            updated.append(
                Execution.objects.filter(pk=execution_id).update(lease_expires_at=expired)
            )
        finally:
            connections.close_all()

    updated: list[int] = []

    def pause() -> None:
        if held:
            lease = held.pop()
            lease.stop_heartbeat()
            # On a connection of its own: the run's may be inside the step's transaction
            # (a ``step.atomic`` function), which would keep the expiry from the others.
            thread = threading.Thread(target=expire)
            thread.start()
            thread.join(timeout=30)
            assert updated == [1], updated
            barrier.wait(timeout=30)  # the other process may take the lease over
            barrier.wait(timeout=30)  # ... and it is in its updater now

    executions.acquire_lease = acquire  # type: ignore[assignment]
    race_workflows.PAUSE = pause
    with runtime_on(alias):
        return str(executions.run_execution(execution_id))


def run_after_the_expiry(alias: str, execution_id: str, barrier: Any) -> str:
    """Once the other run's lease expired, run the execution (taking the lease over); in
    the update's updater (first call), meet the paused run, then both commit at once."""
    from tests.shared import race_workflows
    from tests.shared.outside import runtime_on
    from yieldstar_django.runtime.executions import run_execution

    calls: list[int] = []

    def pause() -> None:
        if not calls:
            calls.append(1)
            barrier.wait(timeout=30)  # the paused run goes on too

    race_workflows.PAUSE = pause
    barrier.wait(timeout=30)  # the other run's lease has expired
    with runtime_on(alias):
        return str(run_execution(execution_id))


def run_once(alias: str, execution_id: str) -> str:
    """``run_execution`` with the runtime on ``alias``; its result."""
    from tests.shared import race_workflows  # noqa: F401  (registers the workflows)
    from tests.shared.outside import runtime_on
    from yieldstar_django.runtime.executions import run_execution

    with runtime_on(alias):
        return str(run_execution(execution_id))


def resume_at_once(alias: str, execution_id: str, barrier: Any) -> str:
    """``run_execution`` at the same moment as the other processes. The run that gets the
    lease meets ``barrier`` inside its ``run`` step; the others meet it once their
    ``run_execution`` returned. Returns ``run_execution``'s result."""
    from tests.shared import race_workflows
    from tests.shared.outside import runtime_on
    from yieldstar_django.runtime.executions import run_execution

    held: list[int] = []

    def pause() -> None:
        held.append(1)
        barrier.wait(timeout=30)

    race_workflows.PAUSE = pause
    with runtime_on(alias):
        result = run_execution(execution_id)
    if not held:
        barrier.wait(timeout=30)
    return str(result)


def run_held(alias: str, execution_id: str, barrier: Any) -> str:
    """Run the execution; inside its ``run`` step meet ``barrier`` twice (the others act
    between the two), then go on. Returns ``run_execution``'s result."""
    from tests.shared import race_workflows
    from tests.shared.outside import runtime_on
    from yieldstar_django.runtime.executions import run_execution

    def pause() -> None:
        barrier.wait(timeout=30)  # the run holds the lease, inside its step
        barrier.wait(timeout=30)  # the others are done

    race_workflows.PAUSE = pause
    with runtime_on(alias):
        return str(run_execution(execution_id))


def while_held(alias: str, execution_id: str, barrier: Any, action: str) -> str:
    """Once a run holds the execution (``run_held``), ``cancel`` it, ``resume`` it (a
    wake delivered meanwhile), ``retry`` it, or ``cancel-retry`` it (cancel, then retry
    and run the retried execution, while the cancelled run still runs its step); the
    result, as a string (an error by its class name)."""
    from tests.shared import race_workflows  # noqa: F401  (registers the workflows)
    from tests.shared.outside import runtime_on
    from yieldstar_django.runtime import ExecutionStateError, cancel_execution, retry_execution
    from yieldstar_django.runtime.executions import run_execution

    barrier.wait(timeout=30)
    try:
        with runtime_on(alias):
            if action == "cancel":
                return str(cancel_execution(execution_id))
            if action == "retry":
                try:
                    return str(retry_execution(execution_id))
                except ExecutionStateError:
                    return "ExecutionStateError"
            if action == "cancel-retry":
                cancelled = cancel_execution(execution_id)
                retried = retry_execution(execution_id)
                return f"{cancelled} {retried} {run_execution(execution_id)}"
            return str(run_execution(execution_id))
    finally:
        barrier.wait(timeout=30)


# --- repairs --------------------------------------------------------------------------------


def retry_at_once(alias: str, execution_id: str) -> str:
    """``retry_execution`` at the same moment as the other processes: ``"True"``,
    ``"False"`` or the name of the error it raised."""
    from tests.shared import race_workflows  # noqa: F401  (registers the workflows)
    from tests.shared.outside import runtime_on
    from yieldstar_django.runtime import ExecutionStateError, retry_execution

    with runtime_on(alias):
        try:
            return str(retry_execution(execution_id))
        except ExecutionStateError:
            return "ExecutionStateError"


def fork_at_once(alias: str, source_id: str, from_step: int, fork_id: str) -> str:
    """``fork_execution`` under one id at the same moment as the other processes: the id,
    or the name of the error it raised."""
    from tests.shared import race_workflows  # noqa: F401  (registers the workflows)
    from tests.shared.outside import runtime_on
    from yieldstar_django.runtime import fork_execution

    with runtime_on(alias):
        try:
            return fork_execution(source_id, from_step=from_step, execution_id=fork_id)
        except ValueError as exc:
            return type(exc).__name__


def run_paused_or_refused(alias: str, execution_id: str, barrier: Any) -> str:
    """``run_paused_then_expired``, whose run may also end with the database refusing its
    insert of a row its successor committed first: then the error's class name."""
    from django.db import DatabaseError

    try:
        return run_paused_then_expired(alias, execution_id, barrier)
    except DatabaseError as exc:
        return type(exc).__name__


# --- schedules -----------------------------------------------------------------------------


def fire_schedule_rounds(alias: str, rounds: int) -> list[int]:
    """``rounds`` relay rounds of schedule firing (``fire_due_schedules``) on ``alias``;
    the number of ticks each round fired."""
    from tests.shared import race_workflows  # noqa: F401  (registers the workflows)
    from tests.shared.outside import runtime_on
    from yieldstar_django.runtime.schedules import fire_due_schedules

    with runtime_on(alias):
        return [fire_due_schedules(alias) for _ in range(rounds)]


def queue_racer(alias: str, queue_name: str, starts: int, keys: int, total: int, path: str) -> int:
    """Start ``starts`` executions of ``race-queued`` into ``queue_name`` (keys ``k0`` ..),
    one at a time, and between them resume a few live executions of the queue (a queued
    one runs its queue's admission instead), until the queue's ``total`` executions (all
    the racers' starts) are finished. Returns the resumes made."""
    from tests.shared import race_workflows
    from tests.shared.outside import runtime_on
    from yieldstar_django.models import Execution
    from yieldstar_django.models.runtime import TERMINAL_STATUSES
    from yieldstar_django.runtime.executions import run_execution
    from yieldstar_django.runtime.queues import get_queue

    rng = random.Random()
    resumes = 0
    with runtime_on(alias):
        queue = get_queue(queue_name)
        made = 0
        deadline = time.monotonic() + HANG_SECONDS
        while time.monotonic() < deadline:
            if made < starts:
                key = f"k{rng.randrange(keys)}"
                queue.start("race-queued", path, key, key=key)
                made += 1
            live = list(
                Execution.objects.filter(queue=queue_name)
                .exclude(status__in=TERMINAL_STATUSES)
                .values_list("id", flat=True)
            )
            if not live:
                if made >= starts and Execution.objects.filter(queue=queue_name).count() >= total:
                    return resumes
                time.sleep(0.005)
                continue
            for execution_id in rng.sample(live, min(3, len(live))):
                run_execution(execution_id)
                resumes += 1
        raise AssertionError(f"the executions of {race_workflows.RACE_QUEUE} did not finish")
