"""``python manage.py yieldstar_prune``: delete old delivered wake intents and old versions.

Commits keep each store instance's history at ``VERSION_HISTORY_LIMIT`` versions as they
go; this command applies a lowered limit to every instance at once, drops the history of
deleted instances, and deletes delivered wake intents older than ``--intents-age``.
"""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS, connections, transaction

from yieldstar_django.conf import yieldstar_settings
from yieldstar_django.wakes import prune_delivered


class Command(BaseCommand):
    help = "Delete delivered wake intents and store versions beyond the history limit."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--database", default=DEFAULT_DB_ALIAS)
        parser.add_argument(
            "--intents-age",
            type=float,
            default=7 * 24 * 3600.0,
            help="delete intents delivered more than this many seconds ago (default 7 days)",
        )
        parser.add_argument(
            "--keep-deleted",
            action="store_true",
            help="keep the versions of deleted store instances",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["intents_age"] < 0:
            raise CommandError("--intents-age must be >= 0")
        using = options["database"]
        intents = prune_delivered(older_than=options["intents_age"], using=using)
        versions = 0
        limit = yieldstar_settings.VERSION_HISTORY_LIMIT
        with transaction.atomic(using=using), connections[using].cursor() as cursor:
            if limit is not None:
                cursor.execute(
                    "DELETE FROM yieldstar_storeversion WHERE id IN ("
                    "SELECT v.id FROM yieldstar_storeversion v "
                    "JOIN yieldstar_storeinstance s ON s.instance_id = v.instance_id "
                    "WHERE v.version <= s.version - %s)",
                    [limit],
                )
                versions += cursor.rowcount
            if not options["keep_deleted"]:
                cursor.execute(
                    "DELETE FROM yieldstar_storeversion WHERE instance_id NOT IN ("
                    "SELECT instance_id FROM yieldstar_storeinstance)"
                )
                versions += cursor.rowcount
        self.stdout.write(f"deleted {intents} wake intent(s) and {versions} store version(s)")
