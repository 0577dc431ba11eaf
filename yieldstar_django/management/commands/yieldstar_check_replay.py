"""``python manage.py yieldstar_check_replay``: replay recorded heaps against the current
workflow code, executing and writing nothing, and exit 1 naming each execution and step
whose code no longer matches its history (see
:mod:`yieldstar_django.runtime.replay_check` and docs/howto/versioning.md)."""

from __future__ import annotations

import json
import sys
from argparse import ArgumentParser
from datetime import datetime, time
from typing import Any

from django.core.management.base import CommandError
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from yieldstar_django.management.commands._base import DatabaseCommand
from yieldstar_django.runtime.replay_check import check_replay


def _since(text: str) -> datetime:
    """An ISO date (midnight, in the current time zone) or date and time (naive: the
    current time zone); ``CommandError`` otherwise."""
    try:
        moment = parse_datetime(text)
        if moment is None:
            day = parse_date(text)
            moment = datetime.combine(day, time()) if day is not None else None
    except ValueError:
        moment = None
    if moment is None:
        raise CommandError(f"--since needs an ISO date or date and time, not {text!r}")
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment)
    return moment


class Command(DatabaseCommand):
    help = (
        "Replay recorded executions against the current workflow code, executing nothing "
        "and writing nothing; exit 1 naming each execution and step that no longer matches."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("--workflow", default=None, help="only executions of this workflow")
        parser.add_argument(
            "--since", default=None, help="only executions created at or after this ISO date"
        )
        parser.add_argument(
            "--limit", type=int, default=None, help="at most this many executions, newest first"
        )
        parser.add_argument(
            "--live", action="store_true", help="only executions that have not finished"
        )
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        using = self.using(options)
        limit = options["limit"]
        if limit is not None and limit < 1:
            raise CommandError("--limit must be >= 1")
        since = _since(options["since"]) if options["since"] is not None else None
        report = check_replay(
            workflow=options["workflow"],
            since=since,
            limit=limit,
            live=options["live"],
            using=using,
        )
        if options["json"]:
            self.stdout.write(json.dumps(report.as_dict(), indent=2, sort_keys=True))
        else:
            for mismatch in report.mismatches:
                where = f" step {mismatch.step_key!r}" if mismatch.step_key else ""
                self.stdout.write(
                    f"MISMATCH execution {mismatch.execution_id!r} (workflow "
                    f"{mismatch.workflow_id!r}){where}: {mismatch.problem}: {mismatch.message}"
                )
            skipped = f", {report.skipped} skipped (workflow not registered)" * bool(report.skipped)
            self.stdout.write(
                f"replayed {report.checked} execution(s): {len(report.mismatches)} "
                f"mismatch(es){skipped}"
            )
        if not report.ok:
            sys.exit(1)
