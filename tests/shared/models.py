"""A project's own model, as a workflow writes it with ``step.atomic``.

``Entry`` is one row a step wrote: the execution, the step (a key of the test's choosing)
and a token unique to the attempt that wrote it, so a test can tell which attempt's row
committed. No unique constraint: a step whose writes committed twice leaves two rows,
which the tests (and the fault suite's checker) count.
"""

from __future__ import annotations

from django.db import models


class Entry(models.Model):
    execution_id = models.CharField(max_length=255)
    step = models.CharField(max_length=255)
    token = models.CharField(max_length=64)

    class Meta:
        app_label = "yieldstar_tests"
        db_table = "yieldstar_tests_entry"
        indexes = [models.Index(fields=["execution_id"], name="yieldstar_tests_entry_exec")]

    def __str__(self) -> str:
        return f"{self.execution_id}/{self.step}: {self.token}"
