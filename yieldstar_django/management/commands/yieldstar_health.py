"""``python manage.py yieldstar_health``: exit 0 when healthy, 1 when a check fails, 2 when
the database cannot be checked; ``--json`` for machines, ``--only`` for a probe that needs
some of the checks (see :mod:`yieldstar_django.health` and docs/operations/health.md)."""

from __future__ import annotations

import json
import sys
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import CommandError
from django.db import DatabaseError

from yieldstar_django.health import CHECKS, check_health
from yieldstar_django.management.commands._base import DatabaseCommand

#: Exit statuses.
HEALTHY, UNHEALTHY, UNCHECKED = 0, 1, 2

#: The checks each ``--probe`` runs: ``liveness`` what restarting the relay (or its pod)
#: cures (a relay that stopped, or hangs: it records no heartbeat), ``readiness`` only that
#: the database answers.
PROBES: dict[str, tuple[str, ...]] = {
    "liveness": ("relay",),
    "readiness": (),
    "all": CHECKS,
}


class Command(DatabaseCommand):
    help = (
        "Check that executions are not stuck and wakes not late; exit 0 when healthy, 1 when "
        "a check fails, 2 when the database cannot be checked."
    )
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: ArgumentParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("--json", action="store_true", help="print the report as JSON")
        parser.add_argument(
            "--only",
            action="append",
            choices=CHECKS,
            default=None,
            help="run this check only (repeatable)",
        )
        parser.add_argument(
            "--probe",
            choices=sorted(PROBES),
            default=None,
            help="the checks of a probe: liveness (a relay seen recently), "
            "readiness (the database answers), all (the default)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        using = self.using(options)
        if options["only"] and options["probe"]:
            raise CommandError("give --only or --probe, not both")
        only = options["only"] or (PROBES[options["probe"]] if options["probe"] else None)
        try:
            report = check_health(using, only=only)
        except DatabaseError as exc:
            if options["json"]:
                self.stdout.write(
                    json.dumps({"healthy": False, "database": using, "error": str(exc)})
                )
            else:
                self.stderr.write(f"yieldstar health: database {using!r} cannot be checked: {exc}")
            sys.exit(UNCHECKED)
        if options["json"]:
            self.stdout.write(json.dumps(report.as_dict(), indent=2, sort_keys=True))
        else:
            for finding in report.findings:
                mark = "ok  " if finding.ok else "FAIL"
                line = f"{mark} {finding.check}: {finding.message}"
                if finding.examples:
                    line += f" (e.g. {', '.join(finding.examples)})"
                self.stdout.write(line)
            self.stdout.write("healthy" if report.healthy else "unhealthy")
        if not report.healthy:
            sys.exit(UNHEALTHY)
