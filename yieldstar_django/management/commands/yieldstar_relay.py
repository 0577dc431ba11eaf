"""``python manage.py yieldstar_relay``: deliver wake intents that were not delivered.

Runs as a long-lived process (one or more per deployment; on PostgreSQL several relays
share the work through ``FOR UPDATE SKIP LOCKED``) and stops cleanly on SIGINT or SIGTERM
after the batch it is publishing. ``--once`` runs a single round and exits, for cron
(non-zero if the round failed: the database unreachable, say).
"""

from __future__ import annotations

import threading
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import CommandError

from yieldstar_django.conf import MAX_SECONDS, is_duration, yieldstar_settings
from yieldstar_django.management.commands._base import DatabaseCommand
from yieldstar_django.wakes import run_relay, stop_on_signals


class Command(DatabaseCommand):
    help = (
        "Deliver wake intents not delivered on commit (broker down, process killed) and "
        "durable timers once due."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        super().add_arguments(parser)
        parser.add_argument(
            "--interval",
            type=float,
            default=None,
            help="seconds between rounds (default: YIELDSTAR['RELAY_INTERVAL'])",
        )
        parser.add_argument("--once", action="store_true", help="run one round and exit")

    def handle(self, *args: Any, **options: Any) -> None:
        interval = options["interval"]
        if interval is not None and not is_duration(interval, 0, inclusive=False):
            raise CommandError(f"--interval must be > 0 and <= {MAX_SECONDS} seconds")
        using = self.using(options)
        stop = threading.Event()
        once = options["once"]
        if not once:
            stop_on_signals(stop)
            every = interval if interval is not None else yieldstar_settings.RELAY_INTERVAL
            self.stdout.write(f"yieldstar relay on {using!r}, every {every}s (Ctrl-C stops)")
        # A long-running relay logs a failed round and goes on; --once (cron) exits
        # non-zero instead, so the failure is seen.
        errors: list[BaseException] = []
        delivered = run_relay(
            using=using, interval=interval, stop=stop, once=once, on_error=errors.append
        )
        if once and errors:
            raise CommandError(f"the relay round failed: {errors[-1]}") from errors[-1]
        self.stdout.write(f"delivered {delivered} wake intent(s)")
