"""The history recorder: every store operation of a process, as JSON lines.

``install(directory)`` wraps ``DatabaseStoreClient.get_store``, ``update_store`` and
``take_from_store`` so each call on a ``faults.*`` store appends an ``invoke`` line before
it runs and an ``ok`` line once it is durable: at the commit of the enclosing transaction
(``on_commit``), since the runtime calls the client inside its own transaction and a
rollback undoes the write. A call that raises appends ``fail``; a process killed in
between appends nothing: both leave the operation indeterminate for the checker.

The model operation an update or take applies is read from the updater or claim object's
``history_args`` (see :mod:`tests.faults.workflows`). One file per process, so lines of
different processes never interleave.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.db import transaction

#: The recorded stores (names starting ``faults.``) and their initial states, which the
#: checker replays from. Kept here, not with the workflows, so the test process reads it
#: without registering the suite's stores and workflows.
INITIAL: dict[str, Any] = {"faults.queue": {"items": []}, "faults.tally": {"total": 0}}

ENV = "YIELDSTAR_FAULTS_HISTORY"
ROLE_ENV = "YIELDSTAR_FAULTS_ROLE"

_lock = threading.Lock()
_ids = itertools.count()
_installed = False


class Recorder:
    """Appends events to ``<directory>/<role>-<pid>.jsonl``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.process = f"{os.environ.get(ROLE_ENV, 'process')}-{os.getpid()}"

    def event(self, event: dict[str, Any]) -> None:
        # Opened per event: a prefork child inherits no file position, and O_APPEND makes
        # each line one write.
        line = (json.dumps(event, sort_keys=True) + "\n").encode()
        path = self.directory / f"{self.process}.jsonl"
        with _lock:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)


def _recorder() -> Recorder:
    # A Celery prefork child has another pid than the parent that installed the wrapper.
    return Recorder(Path(os.environ[ENV]))


def _result(name: str, value: Any) -> tuple[dict[str, Any], str]:
    if name == "get":
        return {"state": value.state, "version": value.version}, value.instance_id
    if name == "update":
        return {
            "state": value.state,
            "previous_version": value.previous_version,
            "version": value.version,
        }, ""
    result = {"matched": value.matched, "version": value.version}
    if value.matched:
        result["selected"] = value.selected
    return result, value.instance_id


def _wrap(name: str, method: Callable[..., Any], model_arg: str | None) -> Callable[..., Any]:
    @functools.wraps(method)
    def recorded(self: Any, definition: Any, id: str, **kwargs: Any) -> Any:
        if not definition.name.startswith("faults."):
            return method(self, definition, id, **kwargs)
        recorder = _recorder()
        key = f"{recorder.process}-{next(_ids)}"
        step = kwargs.get("step_id")
        model = getattr(kwargs.get(model_arg or ""), "history_args", None)
        recorder.event(
            {
                "id": key,
                "type": "invoke",
                "time": time.time(),
                "process": recorder.process,
                "store": f"{definition.name}/{id}",
                "op": name,
                "args": model,
                "step": None if step is None else f"{step.execution_id}/{step.step_key}",
            }
        )
        try:
            value = method(self, definition, id, **kwargs)
        except BaseException as exc:
            recorder.event({"id": key, "type": "fail", "time": time.time(), "error": repr(exc)})
            raise
        result, instance = _result(name, value)

        def ok() -> None:
            recorder.event(
                {
                    "id": key,
                    "type": "ok",
                    "time": time.time(),
                    "result": result,
                    "instance": instance,
                }
            )

        transaction.on_commit(ok, using=self.using)
        return value

    return recorded


def install() -> None:
    """Record this process's store operations if ``YIELDSTAR_FAULTS_HISTORY`` names a
    folder (idempotent)."""
    global _installed
    if _installed or not os.environ.get(ENV):
        return
    from yieldstar_django.connector import DatabaseStoreClient

    client: Any = DatabaseStoreClient
    client.get_store = _wrap("get", client.get_store, None)
    client.update_store = _wrap("update", client.update_store, "updater")
    client.take_from_store = _wrap("take", client.take_from_store, "claim")
    _installed = True


EXIT_ENV = "YIELDSTAR_FAULTS_EXIT_AFTER_COMMIT"


def install_exit_after_commit() -> None:
    """With the probability in ``YIELDSTAR_FAULTS_EXIT_AFTER_COMMIT``, end the process
    with ``os._exit`` right after a transaction that wrote wake intents commits, before
    its ``on_commit`` hook hands the wakes over (the relay must deliver them); or, for a
    commit that publishes during its commit (``PUBLISH_DURING_COMMIT``), once the batch
    that commits it is sent, before the wakes are published."""
    chance = float(os.environ.get(EXIT_ENV) or 0)
    if not chance:
        return
    import random
    import sys

    import yieldstar_django.connector.client
    import yieldstar_django.runtime.timers
    import yieldstar_django.wakes.delivery  # noqa: F401 (every module that binds the name)
    from yieldstar_django import wakes

    original = wakes.deliver_on_commit
    original_publish = wakes.publish_during_commit

    def deliver_on_commit(pending: Any, *, using: str = "default") -> None:
        if pending and random.random() < chance:
            transaction.on_commit(lambda: os._exit(3), using=using)
        original(pending, using=using)

    def publish_during_commit(pending: Any, *, using: str) -> Any:
        if pending and random.random() < chance:
            os._exit(3)  # the batch is sent: the server commits it, then sees us gone
        return original_publish(pending, using=using)

    # Modules import the functions by name: replace them wherever they are bound.
    for name, module in list(sys.modules.items()):
        if not name.startswith("yieldstar_django"):
            continue
        if getattr(module, "deliver_on_commit", None) is original:
            setattr(module, "deliver_on_commit", deliver_on_commit)  # noqa: B010
        if getattr(module, "publish_during_commit", None) is original_publish:
            setattr(module, "publish_during_commit", publish_during_commit)  # noqa: B010
