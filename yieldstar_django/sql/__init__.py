"""SQL as data: the PostgreSQL functions and schema changes the migrations apply, one
``.sql`` file each, read by their migration.

Each function is written once, in the file named after it. Function names carry a version
(``_v2``): a change of a function's contract is a new name, created by a new migration
beside the old one (which a later migration drops), so a rolling deploy never calls a body
it does not expect; a change that keeps the contract is a migration that loads the file
again (``CREATE OR REPLACE``). Statement files hold statements separated by ``;`` at the
end of a line; a function file is one statement.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from importlib.resources import files
from typing import Any

from django.db import migrations

__all__ = [
    "COMMIT_FUNCTIONS",
    "GENERIC_PLAN_FUNCTIONS",
    "REGISTER_WAITER_DROP",
    "REGISTER_WAITER_V2_DROP",
    "PostgresOnly",
    "load",
    "postgres_only",
    "statements",
]


def load(name: str) -> str:
    """The text of ``yieldstar_django/sql/<name>.sql``."""
    return files(__package__).joinpath(f"{name}.sql").read_text(encoding="utf-8")


def statements(name: str) -> list[str]:
    """The statements of a file of plain statements (not of a function body)."""
    return [part.strip() for part in load(name).split(";\n") if part.strip()]


#: The commit functions as of ``0006_commit_deletes``, as statements in the order they
#: run: the helpers the commit calls (the ledger lookup and insert, the wake intents), the
#: commit (``yieldstar_commit_mutation_v3``, deletions included), the type of its answer
#: and the wrappers of the earlier contracts that return it (``yieldstar_commit_mutation_v2``
#: and ``yieldstar_commit_deletion_v2``: each dropped and created again, since an earlier
#: body may return its columns as OUT parameters).
COMMIT_FUNCTIONS = [
    *map(
        load,
        (
            "yieldstar_ledger_status_v1",
            "yieldstar_record_step_v1",
            "yieldstar_write_intents_v1",
            "yieldstar_commit_mutation_v3",
            "yieldstar_commit_outcome_v1",
        ),
    ),
    *statements("yieldstar_commit_mutation_v2"),
    *statements("yieldstar_commit_deletion_v2"),
]


#: Drops ``yieldstar_register_waiter_v1`` (migration ``0007_register_waiter``, backward;
#: the name has one signature).
REGISTER_WAITER_DROP = "DROP FUNCTION IF EXISTS yieldstar_register_waiter_v1"
#: Drops ``yieldstar_register_waiter_v2``, the registration fenced by a run's lease
#: (migration ``0011_register_waiter_fenced``, backward; the name has one signature).
REGISTER_WAITER_V2_DROP = "DROP FUNCTION IF EXISTS yieldstar_register_waiter_v2"

#: The functions the connector called that run with ``plan_cache_mode =
#: force_generic_plan`` (migration ``0008_generic_plans``), each name with one signature.
#: ``yieldstar_register_waiter_v2`` (migration ``0011_register_waiter_fenced``) is created
#: with it.
GENERIC_PLAN_FUNCTIONS = ("yieldstar_commit_mutation_v3", "yieldstar_register_waiter_v1")


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
