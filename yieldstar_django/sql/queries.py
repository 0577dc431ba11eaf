"""Every SQL statement the package runs, by name, from ``queries.sql``.

The file is parsed once, at import: an entry is a header ``-- name --`` (or
``-- name(point, ...) --``), a one-line comment saying what it does, and the text up to
the next header (lines of ``--`` comments are not part of it). ``of(connection)`` returns
the entries with their placeholders filled for that connection's vendor, built once per
vendor when first asked (the tables are the models', known once the app registry is
ready): ``queries.of(connection).read_store``. A name that is not an entry raises
``AttributeError``; ``tests/project/test_queries.py`` checks every name the code asks for.

Placeholders filled when an entry is built:

- ``{<model name>}``: the table of that model of the app (``_meta.db_table``), the one
  place a table is named (``{wakeintent}``: ``WakeIntent``'s);
- ``{<entry name>}``: another entry's text (a condition or a list several statements
  share), itself without points;
- ``{for_update}``, ``{for_no_key_update}``, ``{for_share}``, ``{skip_locked}``,
  ``{collate_c}``: a row lock or collation clause on PostgreSQL, nothing on SQLite, whose
  ``BEGIN IMMEDIATE`` transactions hold the database write lock and whose default collation
  is code-point order.

A header's points are the statement's expansion points: they stay ``{point}`` in the
text, for the caller's ``str.format(point=...)``: an ``IN`` list of :func:`placeholders`,
a ``SET`` list built from the models, an identifier. A caller whose statement is the same
on every call builds it once (see ``runtime/statements.py``).

To add a statement: write its entry in ``queries.sql`` (tables by model name, parameters
``%s``), and ask for it by name with ``queries.of(connection).<name>``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib.resources import files
from typing import Final

from django.core.exceptions import ImproperlyConfigured
from django.db.backends.base.base import BaseDatabaseWrapper

__all__ = ["ENTRIES", "FILE", "Entry", "Queries", "of", "parse", "placeholders"]

#: The file of the statements, beside this module.
FILE: Final = "queries.sql"

#: The clauses that differ by vendor, by vendor; ``""``: no vendor (``of()``).
VENDOR_CLAUSES: Final[dict[str, dict[str, str]]] = {
    "postgresql": {
        "for_update": " FOR UPDATE",
        "for_no_key_update": " FOR NO KEY UPDATE",
        "for_share": " FOR SHARE",
        "skip_locked": " SKIP LOCKED",
        "collate_c": ' COLLATE "C"',
    },
    "sqlite": {
        "for_update": "",
        "for_no_key_update": "",
        "for_share": "",
        "skip_locked": "",
        "collate_c": "",
    },
}

_HEADER = re.compile(r"-- ([a-z][a-z0-9_]*)(?:\(([a-z_, ]*)\))? --")
_PLACEHOLDER = re.compile(r"\{([a-z][a-z0-9_]*)\}")


@dataclass(frozen=True)
class Entry:
    """One named statement (or shared part) of the file, as written."""

    name: str
    comment: str
    text: str
    points: tuple[str, ...] = ()


def parse(source: str) -> dict[str, Entry]:
    """The entries of a queries file, by name, in file order; ``ValueError`` for a
    duplicate name, a header without its comment line, an empty text, or a point
    declared but not used."""
    entries: dict[str, Entry] = {}
    lines = source.splitlines()
    starts = [i for i, line in enumerate(lines) if _HEADER.fullmatch(line.rstrip())]
    for n, start in enumerate(starts):
        match = _HEADER.fullmatch(lines[start].rstrip())
        assert match is not None
        name = match.group(1)
        points = tuple(p.strip() for p in (match.group(2) or "").split(",") if p.strip())
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        comment = lines[start + 1].strip() if start + 1 < end else ""
        if not comment.startswith("-- ") or _HEADER.fullmatch(comment):
            raise ValueError(f"{FILE}: {name} has no one-line comment under its header")
        body = [line.strip() for line in lines[start + 2 : end]]
        text = " ".join(line for line in body if line and not line.startswith("--"))
        if not text:
            raise ValueError(f"{FILE}: {name} has no text")
        if name in entries:
            raise ValueError(f"{FILE}: {name} is written twice")
        missing = set(points) - set(_PLACEHOLDER.findall(text))
        if missing:
            raise ValueError(f"{FILE}: {name} declares points it does not use: {missing}")
        entries[name] = Entry(name, comment[3:], text, points)
    return entries


#: The entries of ``queries.sql``, read at import.
ENTRIES: Final = parse(files(__package__).joinpath(FILE).read_text(encoding="utf-8"))


class Queries:
    """The statements of one vendor, an attribute per entry (its text, filled)."""

    def __init__(self, vendor: str, texts: dict[str, str]) -> None:
        self.vendor = vendor
        self.__dict__.update(texts)

    def __getattr__(self, name: str) -> str:
        """Only reached for a name that is not an entry, or not one of this vendor."""
        if name in ENTRIES:
            raise AttributeError(f"SQL entry {name!r} depends on the vendor: use of(connection)")
        raise AttributeError(f"no SQL entry named {name!r} in {FILE}")


_built: dict[str, Queries] = {}


def of(connection: BaseDatabaseWrapper | None = None) -> Queries:
    """The statements for ``connection``'s vendor; without one, those that are the same
    on every vendor."""
    vendor = "" if connection is None else connection.vendor
    found = _built.get(vendor)
    if found is None:
        found = _built[vendor] = _build(vendor)
    return found


def _build(vendor: str) -> Queries:
    if vendor and vendor not in VENDOR_CLAUSES:
        raise ImproperlyConfigured(
            f"yieldstar_django runs on PostgreSQL and SQLite, not on {vendor!r}"
        )
    from django.apps import apps

    tables = {
        str(model._meta.model_name): model._meta.db_table
        for model in apps.get_app_config("yieldstar").get_models()
    }
    clauses = VENDOR_CLAUSES.get(vendor, {})
    vendor_names = set(VENDOR_CLAUSES["postgresql"])
    texts: dict[str, str] = {}

    def fill(name: str, seen: tuple[str, ...]) -> str | None:
        """The entry's text filled (its points kept); ``None`` if it needs a vendor."""
        if name in texts:
            return texts[name]
        entry = ENTRIES[name]
        missing: list[str] = []

        def one(match: re.Match[str]) -> str:
            key = match.group(1)
            if key in entry.points:
                return match.group(0)
            if key in tables:
                return tables[key]
            if key in vendor_names:
                if key not in clauses:
                    missing.append(key)
                return clauses.get(key, "")
            if key in ENTRIES:
                if key in seen or ENTRIES[key].points:
                    raise ValueError(f"{FILE}: {name} includes {key}, which has points or loops")
                part = fill(key, (*seen, key))
                if part is None:
                    missing.append(key)
                return part or ""
            raise ValueError(f"{FILE}: {name} has an unknown placeholder {{{key}}}")

        text = _PLACEHOLDER.sub(one, entry.text)
        if missing:
            return None
        rest = text
        for point in entry.points:
            rest = rest.replace("{" + point + "}", "")
        if "{" in rest or "}" in rest:
            raise ValueError(f"{FILE}: {name} has a brace that is not a placeholder")
        texts[name] = text
        return text

    for name in ENTRIES:
        fill(name, (name,))
    return Queries(vendor, texts)


@functools.cache
def placeholders(count: int) -> str:
    """``%s, %s, ...``: ``count`` parameters, for an ``IN (...)`` point."""
    return ", ".join(["%s"] * count)
