"""SQL as data: the PostgreSQL functions and schema changes the migrations apply, one
``.sql`` file each, read by their migration.

Each function is written once, in the file named after it. Function names carry a version
(``_v2``): a change of a function's contract is a new name, created by a new migration
beside the old one (which a later release drops), so a rolling deploy never calls a body
it does not expect; a change that keeps the contract is a migration that loads the file
again (``CREATE OR REPLACE``). A file stays as long as a migration loads it. The rules are
in docs/internals/versioning.md. Statement files hold statements separated by ``;`` at the
end of a line; a function file is one statement.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from importlib.resources import files
from typing import Any

from django.db import migrations

__all__ = ["PostgresOnly", "load", "postgres_only", "statements"]


def load(name: str) -> str:
    """The text of ``yieldstar_django/sql/<name>.sql``."""
    return files(__package__).joinpath(f"{name}.sql").read_text(encoding="utf-8")


def statements(name: str) -> list[str]:
    """The statements of a file of plain statements (not of a function body)."""
    return [part.strip() for part in load(name).split(";\n") if part.strip()]


class PostgresOnly(migrations.RunPython):
    """A (non-elidable) ``RunPython`` operation that executes SQL texts in order on
    PostgreSQL and does nothing elsewhere (the portable path needs no functions).

    It is plain SQL, so ``sqlmigrate`` writes it out (``reduces_to_sql``): the texts on
    PostgreSQL, for review or for a DBA who applies the schema by hand, and nothing but
    its description elsewhere. A ``RunPython`` would print "THIS OPERATION CANNOT BE
    WRITTEN AS SQL" on every database."""

    reduces_to_sql = True

    def __init__(self, forward: Sequence[str], backward: Sequence[str]) -> None:
        self.forward_texts = list(forward)
        self.backward_texts = list(backward)
        super().__init__(
            self._runner(self.forward_texts), self._runner(self.backward_texts), elidable=False
        )

    @staticmethod
    def _runner(texts: Sequence[str]) -> Callable[[Any, Any], None]:
        def apply(apps: Any, schema_editor: Any) -> None:
            if schema_editor.connection.vendor == "postgresql":
                for text in texts:
                    schema_editor.execute(text, None)

        return apply

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        """Its SQL texts (``RunPython``'s would be its two closures, which a migration
        writer, squashing, cannot import)."""
        return (self.__class__.__name__, [self.forward_texts, self.backward_texts], {})

    def describe(self) -> str:
        return (
            f"PostgreSQL only ({len(self.forward_texts)} statement(s) forward, "
            f"{len(self.backward_texts)} backward); nothing on other databases"
        )


def postgres_only(forward: Sequence[str], backward: Sequence[str]) -> PostgresOnly:
    """The :class:`PostgresOnly` operation of the given SQL texts."""
    return PostgresOnly(forward, backward)
