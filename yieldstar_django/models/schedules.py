"""Schedules: one row per schedule, defined in code (``define_schedule``, copied here by
the relay) or created in the admin or the HTTP API, with its state: paused or not, its
next tick, its last tick and the execution it started (``runtime/schedules.py``)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone as django_timezone

from .keys import natural_key

__all__ = ["CatchUp", "Schedule"]


class CatchUp(models.TextChoices):
    """What a schedule does with ticks it missed (due longer ago than ``SCHEDULE_GRACE``)."""

    LATEST = "latest", "latest: one execution for the missed ticks"
    ALL = "all", "all: one execution per missed tick"
    SKIP = "skip", "skip: none"


class Schedule(models.Model):
    """A schedule and its state. ``next_tick_at`` is the durable timer the relay fires: a
    tick starts its execution (id ``schedule:<name>:<UTC time>Z``) and moves
    ``next_tick_at`` on in one transaction, under the row's lock, so a tick runs once."""

    name = models.CharField(max_length=200)
    workflow_id = models.CharField(max_length=255, help_text="The workflow each tick starts.")
    cron = models.CharField(
        max_length=255, blank=True, default="", help_text="Cron expression, or empty."
    )
    every_seconds = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Interval in seconds, or empty (a cron schedule)."
    )
    timezone = models.CharField(max_length=64, default="UTC")
    input_json = models.TextField(
        default='{"args":[],"kwargs":{}}', help_text="Canonical JSON of {args, kwargs}."
    )
    catch_up = models.CharField(max_length=8, choices=CatchUp.choices, default=CatchUp.LATEST)
    in_code = models.BooleanField(
        default=False, help_text="Defined with define_schedule (the code wins over edits)."
    )
    paused = models.BooleanField(default=False)
    next_tick_at = models.DateTimeField(null=True, blank=True)
    last_tick_at = models.DateTimeField(null=True, blank=True)
    last_execution_id = models.CharField(max_length=255, blank=True, default="")
    ticks = models.PositiveBigIntegerField(default=0, help_text="Executions its ticks started.")
    missed = models.PositiveBigIntegerField(
        default=0, help_text="Missed ticks its catch-up policy started nothing for."
    )
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=django_timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "yieldstar_schedule"
        ordering = ["name"]
        constraints = natural_key("yieldstar_schedule_unique_name", "name")
        indexes = [
            # The relay's poll: the due schedules that are not paused.
            models.Index(
                fields=["next_tick_at"],
                condition=models.Q(paused=False),
                name="yieldstar_schedule_due_idx",
            ),
        ]
        permissions = [("trigger_schedule", "Can start a schedule's workflow now")]

    def __str__(self) -> str:
        return self.name
