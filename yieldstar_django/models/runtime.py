"""Runtime models: workflow executions and their heap of recorded steps.

Durable values (arguments, step results, workflow results, errors) are stored as their
canonical JSON text (see ``core/durable.py``) in ``TextField`` columns, never as
``jsonb``, so numbers read back exactly. The ``*_json`` columns hold that text; the
properties without the suffix decode them (``""`` stands for "none"; a recorded ``None``
is the text ``null``).
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models import Q
from django.utils import timezone

from ..core.durable import decode_durable
from .decoded import Decoded
from .keys import natural_key

__all__ = [
    "ChildWait",
    "Execution",
    "ExecutionRun",
    "ExecutionStatus",
    "ExecutionStep",
    "QueueState",
    "StepKind",
    "StepStatus",
]


def _decoded(text: str) -> Any:
    """The value of a ``*_json`` column: ``None`` for ``""`` (none recorded)."""
    return decode_durable(text) if text else None


class ExecutionStatus(models.TextChoices):
    """Where an execution is. ``completed``, ``failed`` and ``cancelled`` are terminal."""

    QUEUED = "queued", "queued"  # started into a queue; waits for a slot (no run requested)
    PENDING = "pending", "pending"  # created; its first run is requested
    RUNNING = "running", "running"  # a worker holds its lease (or held it and died)
    WAITING = "waiting", "waiting"  # suspended on a take; a waiter is registered
    SLEEPING = "sleeping", "sleeping"  # suspended on a sleep; a timer is scheduled
    RETRYING = "retrying", "retrying"  # a retryable run step failed; a retry is scheduled
    COMPLETED = "completed", "completed"
    FAILED = "failed", "failed"
    CANCELLED = "cancelled", "cancelled"


TERMINAL_STATUSES: frozenset[str] = frozenset(
    {ExecutionStatus.COMPLETED, ExecutionStatus.FAILED, ExecutionStatus.CANCELLED}
)


class StepKind(models.TextChoices):
    """The step primitive that recorded a heap entry."""

    RUN = "run", "run"
    SLEEP = "sleep", "sleep"
    TAKE = "take", "take"
    UPDATE = "update", "update"
    GET = "get", "get"
    PATCH = "patch", "patch"
    TAKE_ANY = "take_any", "take_any"
    TAKE_LEASE = "take_lease", "take_lease"
    END_LEASE = "end_lease", "end_lease"
    ATOMIC = "atomic", "atomic"
    DELETE = "delete", "delete"
    START = "start", "start"
    WAIT = "wait", "wait"


class StepStatus(models.TextChoices):
    """``pending``: started but not finished (a sleep's timer, a retry, a waiting take)."""

    PENDING = "pending", "pending"
    COMPLETED = "completed", "completed"
    FAILED = "failed", "failed"


class Execution(models.Model):
    """One run of a workflow, from ``start_workflow`` to a terminal status.

    The lease (``lease_owner``, ``lease_expires_at``) is taken by a conditional UPDATE when
    a worker starts a run and cleared when it suspends or finishes; a lease past its expiry
    may be taken over. ``wake_pending`` records a wake that arrived during a run, so the
    lease holder runs the workflow again before releasing it.
    """

    id = models.CharField(primary_key=True, max_length=255)
    workflow_id = models.CharField(max_length=255, db_index=True)
    status = models.CharField(
        max_length=16, choices=ExecutionStatus.choices, default=ExecutionStatus.PENDING
    )
    input_json = models.TextField(help_text="Canonical JSON of {args, kwargs}.")
    started_by = models.CharField(
        max_length=255,
        blank=True,
        default="",
        db_default="",
        help_text="Who started it over the HTTP API (http:<user pk>); empty for a start "
        "made in Python.",
    )
    result_json = models.TextField(blank=True, default="")
    error_json = models.TextField(blank=True, default="")
    waiting_on = models.CharField(
        max_length=255, blank=True, default="", help_text="Key of the step it is suspended on."
    )
    wake_at = models.DateTimeField(
        null=True, blank=True, help_text="When a sleeping or retrying execution is due."
    )
    lease_owner = models.CharField(max_length=64, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    lease_backend = models.IntegerField(
        null=True,
        blank=True,
        help_text="PostgreSQL backend (pid) of the connection that took the lease.",
    )
    wake_pending = models.BooleanField(default=False)
    runs = models.PositiveIntegerField(default=0, help_text="Runs (replays) so far.")
    retries = models.PositiveIntegerField(
        default=0,
        db_default=0,
        help_text="Times ``retry_execution`` sent it back to run (failed or cancelled).",
    )
    forked_from = models.CharField(
        max_length=255,
        blank=True,
        default="",
        db_default="",
        help_text="Id of the execution this one was forked from (``fork_execution``).",
    )
    fork_step = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="How many recorded steps of ``forked_from`` its heap began with.",
    )
    parent = models.CharField(
        max_length=255,
        blank=True,
        default="",
        db_default="",
        db_index=True,
        help_text="Id of the execution that started this one with ``step.start`` (empty: none).",
    )
    deadline = models.DateTimeField(
        null=True,
        blank=True,
        db_default=None,
        help_text="When it is cancelled with ``DeadlineExceededError`` if not finished.",
    )
    awaited = models.BooleanField(
        default=False,
        db_default=False,
        help_text="Another execution waits for it (``step.wait``): its end wakes that one.",
    )
    awaiting = models.PositiveIntegerField(
        default=0,
        db_default=0,
        help_text="Executions its waiting ``step.wait``/``step.gather`` still waits for.",
    )
    schedule = models.CharField(
        max_length=200,
        blank=True,
        default="",
        db_default="",
        help_text="The schedule whose tick (or trigger) started it; empty otherwise.",
    )
    queue = models.CharField(
        max_length=255,
        blank=True,
        default="",
        db_default="",
        help_text="The queue it was started into (``define_queue``); empty for none.",
    )
    queue_key = models.CharField(
        max_length=255,
        blank=True,
        default="",
        db_default="",
        help_text="The key its queue's ``per_key`` limit, debounce and dedupe count by.",
    )
    priority = models.IntegerField(
        default=0, db_default=0, help_text="Higher starts first among the queue's waiting."
    )
    queue_seq = models.BigIntegerField(
        null=True, blank=True, help_text="Order of arrival among its queue's waiting."
    )
    admitted_at = models.DateTimeField(
        null=True, blank=True, help_text="When its queue gave it a slot (its start)."
    )
    not_before = models.DateTimeField(
        null=True, blank=True, help_text="A debounced start: not admitted before this time."
    )
    debounce_until = models.DateTimeField(
        null=True, blank=True, help_text="A debounced start: its latest ``not_before``."
    )
    trace_context = models.CharField(
        max_length=255,
        blank=True,
        default="",
        db_default="",
        help_text="W3C traceparent of its start (with tracing on): its runs join that trace.",
    )
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "yieldstar_execution"
        ordering = ["-created_at"]
        indexes = [
            # A queue's waiting executions in admission order.
            models.Index(
                fields=["queue", "priority", "queue_seq"],
                condition=Q(status="queued"),
                name="yieldstar_exec_queued_idx",
            ),
            # A queue's starts by time (rate windows) and its live ones by key.
            models.Index(
                fields=["queue", "admitted_at"],
                condition=~Q(queue=""),
                name="yieldstar_exec_admitted_idx",
            ),
            models.Index(
                fields=["queue", "queue_key", "status"],
                condition=~Q(queue=""),
                name="yieldstar_exec_queue_key_idx",
            ),
            models.Index(fields=["status", "created_at"], name="yieldstar_exec_status_idx"),
            # Retention finds finished executions oldest first.
            models.Index(fields=["status", "finished_at"], name="yieldstar_exec_finished_idx"),
            # The list filtered by schedule, newest first (only scheduled executions).
            models.Index(
                fields=["schedule", "created_at"],
                condition=~Q(schedule=""),
                name="yieldstar_exec_schedule_idx",
            ),
        ]
        permissions = [
            ("retry_execution", "Can retry a failed or cancelled execution"),
            ("fork_execution", "Can fork an execution from one of its steps"),
        ]

    def __str__(self) -> str:
        return f"{self.workflow_id} {self.id} ({self.status})"

    @property
    def input(self) -> dict[str, Any]:
        """``{"args": [...], "kwargs": {...}}`` the execution was started with."""
        value: dict[str, Any] = decode_durable(self.input_json)
        return value

    result = Decoded[Any](
        "result_json", _decoded, "The workflow's return value once ``completed``, else ``None``."
    )
    error = Decoded[dict[str, Any] | None](
        "error_json",
        _decoded,
        """Once ``failed``: ``{"type", "message", "traceback", ...}`` of the error.""",
    )

    @property
    def is_finished(self) -> bool:
        """Whether the status is terminal (``completed``, ``failed`` or ``cancelled``)."""
        return self.status in TERMINAL_STATUSES


class QueueState(models.Model):
    """A queue's counters (``define_queue``), one row per queue name, created by its first
    start. Its row lock orders every admission, start, finish and cancel of the queue's
    executions: ``running`` counts those admitted and not finished, ``waiting`` those
    ``queued``, ``next_seq`` numbers arrivals (FIFO within a priority). See
    ``runtime/queues.py``."""

    name = models.CharField(primary_key=True, max_length=255)
    paused = models.BooleanField(default=False, db_default=False)
    running = models.IntegerField(default=0, db_default=0)
    waiting = models.IntegerField(default=0, db_default=0)
    next_seq = models.BigIntegerField(default=0, db_default=0)
    # The definition's limits as its last start wrote them: whoever frees a slot admits
    # by them, in a process that need not import the definition.
    concurrency = models.IntegerField(null=True, blank=True)
    per_key = models.IntegerField(null=True, blank=True)
    rate_limit = models.IntegerField(null=True, blank=True)
    rate_seconds = models.FloatField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "yieldstar_queue"
        ordering = ["name"]
        verbose_name = "queue"

    def __str__(self) -> str:
        return self.name


class ExecutionStep(models.Model):
    """One heap entry: the recorded outcome of one step of an execution, by step key.

    A ``completed`` entry holds the step's result (``value_json``), a ``failed`` one the
    error re-raised into the workflow on every replay (``error_json``). A ``pending`` entry
    marks a step that has started but not finished: a sleep until ``wake_at``, a run step
    retrying at ``wake_at``, a take waiting for a match.
    """

    # Lookups by execution are served by the unique (execution, step_key) and the replay
    # index (execution, position, id), which begin with it: no index of its own.
    execution = models.ForeignKey(
        Execution, on_delete=models.CASCADE, related_name="steps", db_index=False
    )
    step_key = models.CharField(max_length=255)
    position = models.PositiveIntegerField(help_text="Index of the step in replay order.")
    kind = models.CharField(max_length=16, choices=StepKind.choices)
    fingerprint = models.CharField(
        max_length=512, blank=True, default="", help_text="What the step ran: function or store."
    )
    status = models.CharField(max_length=16, choices=StepStatus.choices)
    value_json = models.TextField(blank=True, default="")
    error_json = models.TextField(blank=True, default="")
    attempts = models.PositiveIntegerField(default=0)
    wake_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(
        default=timezone.now, help_text="When the step began, in the run that wrote the row."
    )
    recorded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "yieldstar_execution_step"
        ordering = ["execution", "position"]
        constraints = natural_key("yieldstar_step_unique_key", "execution", "step_key")
        indexes = [
            # The recorded decisions of ``step.patched()``, by change id and value: the
            # executions admin's patch decision filter.
            models.Index(
                fields=["step_key", "value_json"],
                condition=Q(kind=StepKind.PATCH),
                name="yieldstar_step_patch_idx",
            ),
            # The execution page of the admin shows a page of the heap in replay order
            # (``ORDER BY position, id``): a scan of this index, not a sort of the whole
            # heap.
            models.Index(fields=["execution", "position", "id"], name="yieldstar_step_replay_idx"),
        ]
        verbose_name = "heap entry"
        verbose_name_plural = "heap entries"

    def __str__(self) -> str:
        return f"{self.execution_id}/{self.step_key} {self.kind} ({self.status})"

    value = Decoded[Any](
        "value_json", _decoded, "The recorded result (``None`` unless ``completed``)."
    )
    error = Decoded[dict[str, Any] | None](
        "error_json",
        _decoded,
        "The recorded error (``failed``), or the last retryable error (``pending``).",
    )


class ExecutionRun(models.Model):
    """One run of an execution: one taking of its lease, from ``acquire_lease`` to the
    release (or to nothing, when the worker died or lost the lease and another run took it
    over). Written by the statements that take and release the lease, so it costs no round
    trip of its own; ``number`` is the execution's ``runs`` after that taking."""

    id = models.BigAutoField(primary_key=True)
    # Lookups by execution are served by the (execution, number) index: none of its own.
    execution = models.ForeignKey(
        Execution,
        on_delete=models.CASCADE,
        related_name="run_rows",
        db_index=False,
        db_constraint=False,
    )
    number = models.PositiveIntegerField(help_text="1 for the first run, then 2, ...")
    lease_owner = models.CharField(max_length=64, help_text="The run's lease token.")
    worker = models.CharField(
        max_length=255,
        blank=True,
        default="",
        db_default="",
        help_text="The process that ran it: host name and process id.",
    )
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(
        null=True, blank=True, help_text="When it let the lease go; empty if it never did."
    )
    outcome = models.CharField(
        max_length=16,
        blank=True,
        default="",
        db_default="",
        help_text="The execution's status when the run let the lease go.",
    )

    class Meta:
        db_table = "yieldstar_execution_run"
        ordering = ["execution", "number"]
        # Not unique: a taking of the lease must never fail on this table.
        indexes = [models.Index(fields=["execution", "number"], name="yieldstar_run_number_idx")]
        verbose_name = "execution run"

    def __str__(self) -> str:
        return f"{self.execution_id} run {self.number}"


class ChildWait(models.Model):
    """One execution a waiting ``step.wait``/``step.gather`` waits for: written by the
    waiting step, deleted by the awaited execution's end (which counts its waiter's
    ``awaiting`` down and wakes it at zero), see ``runtime/children.py``."""

    execution = models.ForeignKey(
        Execution, on_delete=models.CASCADE, related_name="child_waits", db_index=False
    )
    step_key = models.CharField(max_length=255)
    awaited_id = models.CharField(max_length=255, db_index=True)

    class Meta:
        db_table = "yieldstar_child_wait"
        constraints = natural_key(
            "yieldstar_child_wait_unique", "execution", "step_key", "awaited_id"
        )
        verbose_name = "awaited execution"

    def __str__(self) -> str:
        return f"{self.execution_id}/{self.step_key} waits for {self.awaited_id}"
