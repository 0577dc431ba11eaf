"""Store models: instances, versions, the applied-steps ledger, waiters and wake intents.

The connector (:mod:`yieldstar_django.connector`) writes these tables with raw SQL on its
hot path; the ORM is for reading them (the admin, the API, tests). Writing them through the
ORM bypasses the compare-and-swap and the wakes: change stores through a store client.

States, results and paths are kept as ``TEXT`` holding canonical JSON, never ``jsonb``:
``jsonb`` rewrites numbers (``1e20`` reads back as an integer) and durable values must read
back unchanged (see ``core/durable.py``).
"""

from __future__ import annotations

import json
from typing import Any

from django.db import models
from django.db.models import Q

from ..core.constants import MAX_COHORT_LENGTH, MAX_KEY_LENGTH, WaiterKind
from ..core.durable import decode_durable
from ..core.types import StorePath
from .decoded import Decoded
from .keys import natural_key

__all__ = [
    "AppliedStep",
    "StoreInstance",
    "StoreVersion",
    "Waiter",
    "WaiterPath",
    "WakeIntent",
]

#: Longest store name, store id, execution id, workflow id or step key, in characters.


def _decode_paths(text: str) -> list[StorePath]:
    return [tuple(path) for path in json.loads(text)]


class StoreInstance(models.Model):
    """The current state of one store: ``(name, store_id)`` at ``(instance_id, version)``.

    A new ``instance_id`` names each creation of the store; ``version`` is 0 at creation and
    grows by one per committed change. ``state`` is the canonical JSON encoding.
    """

    name = models.CharField("store name", max_length=MAX_KEY_LENGTH)
    store_id = models.CharField("store id", max_length=MAX_KEY_LENGTH)
    instance_id = models.CharField("instance id", max_length=64)
    version = models.BigIntegerField("version")
    state = models.TextField("state (canonical JSON)")
    created_at = models.DateTimeField("created")
    updated_at = models.DateTimeField("updated")

    class Meta:
        verbose_name = "store"
        constraints = natural_key("yieldstar_store_key", "name", "store_id")
        # On PostgreSQL, migration 0002_postgres adds two indexes the model cannot declare portably:
        # (name, store_id COLLATE "C") for ids in code-point order (the API's pages,
        # ``list_stores``) and store_id varchar_pattern_ops for the admin's prefix search.

    def __str__(self) -> str:
        return f"{self.name}/{self.store_id} v{self.version}"

    value = Decoded[Any]("state", decode_durable, "The decoded state.")


class StoreVersion(models.Model):
    """One committed change of a store instance (version 0 is its creation).

    Kept for the last ``VERSION_HISTORY_LIMIT`` versions of each instance, with the full
    state when ``VERSION_HISTORY_KEEP_STATE``; deleted with the instance. ``step_execution_id``
    and ``step_key`` name the workflow step that made the change, if any.
    """

    store_name = models.CharField("store name", max_length=MAX_KEY_LENGTH)
    store_id = models.CharField("store id", max_length=MAX_KEY_LENGTH)
    instance_id = models.CharField("instance id", max_length=64)
    version = models.BigIntegerField("version")
    changed_paths = models.TextField("changed paths (JSON)", default="[]")
    # NULL means "no step" / "state not kept", which an empty string cannot say.
    step_execution_id = models.CharField(  # noqa: DJ001
        "step execution id", max_length=MAX_KEY_LENGTH, null=True, blank=True
    )
    step_key = models.CharField(  # noqa: DJ001
        "step key", max_length=MAX_KEY_LENGTH, null=True, blank=True
    )
    state = models.TextField("state (canonical JSON)", null=True, blank=True)  # noqa: DJ001
    created_at = models.DateTimeField("committed")

    class Meta:
        constraints = natural_key("yieldstar_version_key", "instance_id", "version")
        # No index on (store_name, store_id): one index fewer to write on every commit.
        # The history of an instance is found by ``instance_id`` (the unique constraint).

    def __str__(self) -> str:
        return f"{self.store_name}/{self.store_id} v{self.version}"

    paths = Decoded("changed_paths", _decode_paths, "The decoded changed paths, as tuples.")

    @property
    def value(self) -> Any:
        """The decoded state, or ``None`` when it was not kept."""
        return None if self.state is None else decode_durable(self.state)


class AppliedStep(models.Model):
    """The applied-steps ledger: the recorded result of a store operation made by a step.

    Keyed by (store name, store id, execution id, step key); written in the transaction of
    the change it records, and kept across deletion and re-creation of the store.
    """

    store_name = models.CharField("store name", max_length=MAX_KEY_LENGTH)
    store_id = models.CharField("store id", max_length=MAX_KEY_LENGTH)
    execution_id = models.CharField("execution id", max_length=MAX_KEY_LENGTH)
    step_key = models.CharField("step key", max_length=MAX_KEY_LENGTH)
    result = models.TextField("recorded result (canonical JSON)")
    #: The kind of operation that recorded the result (``LedgerOperation``): a replay by
    #: another kind raises ``StoreStepMismatchError``. Empty on rows recorded before the
    #: column existed, which replay to any operation (their result text names its kind).
    operation = models.CharField(
        "operation",
        max_length=16,
        blank=True,
        default="",
        db_default="",
        choices=[("update", "update"), ("take", "take"), ("delete", "delete")],
    )
    created_at = models.DateTimeField("recorded")

    class Meta:
        constraints = natural_key(
            "yieldstar_applied_step_key", "store_name", "store_id", "execution_id", "step_key"
        )
        indexes = [
            # The store page of the admin lists a store's ledger newest first
            # (``ORDER BY created_at DESC, id DESC``): a backward scan of this index.
            models.Index(
                fields=["store_name", "store_id", "created_at", "id"],
                name="yieldstar_applied_step_recent",
            ),
            # Retention deletes a finished execution's ledger rows.
            models.Index(fields=["execution_id"], name="yieldstar_applied_step_exec"),
        ]

    def __str__(self) -> str:
        return f"{self.execution_id}:{self.step_key} on {self.store_name}/{self.store_id}"

    value = Decoded[Any]("result", decode_durable, "The decoded ledger record.")


class Waiter(models.Model):
    """An execution waiting for a change of a store (a versioned read observation).

    ``read_paths`` is the JSON list of the paths its selector read at
    (``instance_id``, ``since_version``). Matching goes through :class:`WaiterPath`.
    ``woken_at`` is set by the first change that wakes it: a waiter is woken once per
    registration, and its execution registers it again (``woken_at`` reset) if its step
    still has to wait. Waiters of one ``cohort`` (takes with the same selector) are woken
    one at a time, the first in registration order (:mod:`yieldstar_django.core.cohorts`).
    """

    workflow_id = models.CharField("workflow id", max_length=MAX_KEY_LENGTH)
    execution_id = models.CharField("execution id", max_length=MAX_KEY_LENGTH)
    step_key = models.CharField("step key", max_length=MAX_KEY_LENGTH)
    store = models.ForeignKey(
        StoreInstance,
        on_delete=models.CASCADE,
        related_name="waiters",
        verbose_name="store",
        db_column="store_pk",
        # Served by ``yieldstar_waiter_listed`` (store, created_at, id), which begins with it.
        db_index=False,
    )
    instance_id = models.CharField("instance id", max_length=64)
    since_version = models.BigIntegerField("since version")
    read_paths = models.TextField("read paths (JSON)", default="[]")
    created_at = models.DateTimeField("registered")
    woken_at = models.DateTimeField("woken", null=True, blank=True)
    # NULL, not "": the commit functions test it with IS NULL.
    cohort = models.CharField(  # noqa: DJ001
        "cohort", max_length=MAX_COHORT_LENGTH, null=True, blank=True
    )

    class Meta:
        constraints = natural_key("yieldstar_waiter_key", "execution_id", "step_key", "store")
        indexes = [
            # The store page of the admin lists a store's first waiters in the order they
            # registered (``ORDER BY created_at, id``): a scan of this index.
            models.Index(fields=["store", "created_at", "id"], name="yieldstar_waiter_listed"),
            # The first unwoken waiter of a cohort, which a removal of a woken one wakes.
            models.Index(
                fields=["store", "cohort", "id"],
                name="yieldstar_waiter_cohort",
                condition=Q(woken_at__isnull=True, cohort__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.execution_id}:{self.step_key} waits since v{self.since_version}"

    paths = Decoded("read_paths", _decode_paths, "The decoded read paths, as tuples.")


class WaiterPath(models.Model):
    """The index of waiters by read path: how a mutation finds the waiters it wakes.

    A read path ``r`` and a changed path ``c`` intersect when one is a prefix of the other.
    Each read path ``r`` of a waiter has a row of kind ``READ`` holding ``key(r)`` and one
    row of kind ``PREFIX`` for each non-empty proper prefix ``p`` of ``r`` holding
    ``key(p)``; a waiter whose instance is not the store's has one row of kind ``ALWAYS``.
    A mutation with changed paths ``C`` wakes the waiters with a ``READ`` row whose key is
    that of a prefix of some ``c`` (``c`` included), a ``PREFIX`` row whose key is that of
    some ``c``, or an ``ALWAYS`` row: equality lookups on ``(store, kind, key)`` only, so
    the cost does not grow with the number of waiters and no collation is involved. A
    change at the root ``()`` wakes every waiter of the store. ``key`` is
    :func:`yieldstar_django.core.waiter_index.path_key`.
    """

    READ = WaiterKind.READ
    PREFIX = WaiterKind.PREFIX
    ALWAYS = WaiterKind.ALWAYS
    KIND_CHOICES = [(READ, "read path"), (PREFIX, "prefix of a read path"), (ALWAYS, "always")]

    waiter = models.ForeignKey(
        Waiter, on_delete=models.CASCADE, related_name="path_rows", db_constraint=False
    )
    store = models.ForeignKey(
        StoreInstance,
        on_delete=models.CASCADE,
        related_name="+",
        db_constraint=False,
        db_index=False,
        db_column="store_pk",
    )
    kind = models.SmallIntegerField(choices=KIND_CHOICES)
    path = models.TextField("path key")

    class Meta:
        indexes = [
            models.Index(fields=["store", "kind", "path"], name="yieldstar_waiterpath_match"),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.path}"


class WakeIntent(models.Model):
    """The wake outbox: a request to resume ``execution_id``, written in the transaction
    that requires it.

    An immediate wake is handed to the wake backend when its transaction commits; a
    durable timer (``due_at`` set) waits for the relay. The relay delivers every intent not
    yet acknowledged once ``available_at`` has passed (commit time + ``RELAY_DELAY`` for an
    immediate wake, the due time for a timer), and pushes ``available_at`` back with a
    growing delay each time, so a wake handed to a worker that died is delivered again.
    An intent is acknowledged (``delivered_at``) only when the wake took effect: a run of
    the execution started after it was due, or the execution finished.
    """

    execution_id = models.CharField("execution id", max_length=MAX_KEY_LENGTH)
    workflow_id = models.CharField("workflow id", max_length=MAX_KEY_LENGTH)
    reason = models.CharField("reason", max_length=32)
    available_at = models.DateTimeField("deliverable from")
    due_at = models.DateTimeField("due", null=True, blank=True)
    delivered_at = models.DateTimeField("acknowledged", null=True, blank=True)
    attempts = models.IntegerField("deliveries", default=0)
    last_error = models.TextField("last error", blank=True, default="")
    created_at = models.DateTimeField("created")

    class Meta:
        indexes = [
            models.Index(
                fields=["available_at"],
                condition=Q(delivered_at__isnull=True),
                name="yieldstar_wake_due",
            ),
            models.Index(fields=["execution_id"], name="yieldstar_wake_execution"),
        ]

    def __str__(self) -> str:
        state = "acknowledged" if self.delivered_at else "pending"
        return f"wake {self.execution_id} ({self.reason}, {state})"
