"""``python manage.py yieldstar_prune``: delete old delivered wake intents, old versions,
finished executions past ``RETENTION_SECONDS`` and idle stores past their definition's
``retention``.

Commits keep each store instance's history at ``VERSION_HISTORY_LIMIT`` versions as they
go; this command applies a lowered limit to every instance at once, drops the history of
deleted instances, deletes delivered wake intents older than ``--intents-age``, deletes
executions finished more than ``RETENTION_SECONDS`` ago (``--executions-age`` overrides
it) with their heaps, wake intents and ledger rows, and deletes the stores of definitions
with a ``retention`` untouched for that long with no waiter and no held claim lease
(``--keep-idle-stores`` leaves them), in batches of ``--batch-size`` (see
:mod:`yieldstar_django.retention`).
"""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import CommandError
from django.db import connections, transaction

from yieldstar_django.conf import MAX_SECONDS, is_duration, yieldstar_settings
from yieldstar_django.management.commands._base import DatabaseCommand
from yieldstar_django.retention import MAX_BATCH_SIZE, prune_finished, prune_idle_stores
from yieldstar_django.sql import queries
from yieldstar_django.wakes import prune_delivered


class Command(DatabaseCommand):
    help = (
        "Delete delivered wake intents, store versions beyond the history limit, finished "
        "executions past RETENTION_SECONDS and idle stores past their retention."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        super().add_arguments(parser)
        parser.add_argument(
            "--intents-age",
            type=float,
            default=7 * 24 * 3600.0,
            help="delete intents delivered more than this many seconds ago (default 7 days)",
        )
        parser.add_argument(
            "--executions-age",
            type=float,
            default=None,
            help="delete executions finished more than this many seconds ago "
            "(default: RETENTION_SECONDS; nothing when that is None)",
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=500,
            help=f"executions or intents deleted per transaction, 1 to {MAX_BATCH_SIZE} "
            "(default 500)",
        )
        parser.add_argument(
            "--keep-idle-stores",
            action="store_true",
            help="keep the stores a definition's retention would delete",
        )
        parser.add_argument(
            "--keep-deleted",
            action="store_true",
            help="keep the versions of deleted store instances",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not is_duration(options["intents_age"], 0):
            raise CommandError(f"--intents-age must be >= 0 and <= {MAX_SECONDS} seconds")
        if not 1 <= options["batch_size"] <= MAX_BATCH_SIZE:
            raise CommandError(f"--batch-size must be from 1 to {MAX_BATCH_SIZE}")
        age = options["executions_age"]
        if age is None:
            age = yieldstar_settings.RETENTION_SECONDS
        if age is not None and not is_duration(age, 0):
            raise CommandError(
                f"--executions-age (default RETENTION_SECONDS) must be >= 0 and "
                f"<= {MAX_SECONDS} seconds"
            )
        using = self.using(options)
        if age is not None:
            # Delivered intents of live executions go by --intents-age, below.
            pruned = prune_finished(
                older_than=age,
                batch_size=options["batch_size"],
                using=using,
                delivered_intents=False,
            )
            self.stdout.write(
                f"deleted {pruned.executions} finished execution(s) with "
                f"{pruned.heap_entries} heap entry(ies), {pruned.ledger_rows} ledger row(s) "
                f"and {pruned.intents} wake intent(s)"
            )
        if not options["keep_idle_stores"]:
            stores = prune_idle_stores(batch_size=options["batch_size"], using=using)
            per_name = ", ".join(f"{n} of {name}" for name, n in stores.items() if n)
            self.stdout.write(
                f"deleted {sum(stores.values())} idle store(s)"
                + (f" ({per_name})" if per_name else "")
            )
        intents = prune_delivered(
            older_than=options["intents_age"], batch_size=options["batch_size"], using=using
        )
        versions = 0
        limit = yieldstar_settings.VERSION_HISTORY_LIMIT
        with transaction.atomic(using=using), connections[using].cursor() as cursor:
            if limit is not None:
                cursor.execute(queries.of().prune_versions_over_limit, [limit])
                versions += cursor.rowcount
            if not options["keep_deleted"]:
                cursor.execute(queries.of().prune_versions_of_deleted_stores)
                versions += cursor.rowcount
        self.stdout.write(f"deleted {intents} wake intent(s) and {versions} store version(s)")
