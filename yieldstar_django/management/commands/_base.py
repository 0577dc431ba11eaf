"""What the ``yieldstar_*`` management commands share (a leading ``_``: not a command)."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from yieldstar_django.conf import database_alias


class DatabaseCommand(BaseCommand):
    """A command that works on one database, chosen by ``--database``.

    Subclasses extend :meth:`add_arguments` (calling ``super()``) and read the alias with
    :meth:`using`.
    """

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--database", default=None, help="database alias (default: YIELDSTAR['DATABASE_ALIAS'])"
        )

    @staticmethod
    def using(options: dict[str, Any]) -> str:
        """The alias ``--database`` names, else ``YIELDSTAR['DATABASE_ALIAS']``;
        ``CommandError`` if ``DATABASES`` has no such alias."""
        alias = database_alias(options["database"])
        if alias not in settings.DATABASES:
            raise CommandError(f"--database {alias!r} names no database in DATABASES")
        return alias
