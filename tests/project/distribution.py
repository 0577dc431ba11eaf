"""Citus's rules for distributing tables and delegating functions, checked against a
schema: the distribution plan of ``docs/operations/scaling.md`` read from its tables, the
schema read from a PostgreSQL catalog, and the rules as a pure function of the two
(``violations``), so that a synthetic schema can show each rule failing.

The rules (Citus 12, "Distributing tables" and ``create_distributed_function``):

- a distributed table has its distribution column, and every primary key and unique
  constraint (or unique index) of it includes that column;
- a foreign key between two distributed tables joins their distribution columns (the
  child's distribution column is one of its columns, referencing the parent's) and the
  two are co-located; a distributed table may reference a reference table, but neither a
  reference nor a local table may reference a distributed one, nor a distributed table a
  local one;
- co-located tables have distribution columns of one type;
- a function delegated to the worker holding a shard takes the distribution key as an
  argument, of the distribution column's type (or one binary coercible to it: ``text``
  for ``varchar``), and names a table to be co-located with.

A table or function of the app that the plan does not list is a violation too: a new one
must be planned before it ships.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "DISTRIBUTED",
    "LOCAL",
    "REFERENCE",
    "ForeignKey",
    "Function",
    "FunctionPlan",
    "Plan",
    "Schema",
    "Table",
    "TablePlan",
    "UniqueKey",
    "plan_from_markdown",
    "read_catalog",
    "violations",
]

DISTRIBUTED = "distributed"
REFERENCE = "reference"
LOCAL = "local"
#: How the plan says a function runs when it is not delegated.
NOT_DELEGATED = "not delegated"

#: Types a distribution argument may have for a column of the key's type (binary
#: coercible, as Citus requires).
COMPATIBLE_TYPES = {"character varying": {"character varying", "text"}, "text": {"text"}}


@dataclass(frozen=True)
class UniqueKey:
    name: str
    columns: tuple[str, ...]
    primary: bool = False


@dataclass(frozen=True)
class ForeignKey:
    name: str
    columns: tuple[str, ...]
    target: str
    target_columns: tuple[str, ...]


@dataclass
class Table:
    name: str
    columns: dict[str, str]  # name -> type
    unique: list[UniqueKey] = field(default_factory=list)
    foreign_keys: list[ForeignKey] = field(default_factory=list)


@dataclass(frozen=True)
class Function:
    name: str
    arguments: tuple[tuple[str, str], ...]  # (name, type) of each input argument


@dataclass
class Schema:
    tables: dict[str, Table]
    functions: dict[str, Function]


@dataclass(frozen=True)
class TablePlan:
    kind: str  # DISTRIBUTED, REFERENCE or LOCAL
    column: str = ""  # the distribution column of a distributed table
    colocate_with: str = ""  # the table whose group it joins; "" for the group's first


@dataclass(frozen=True)
class FunctionPlan:
    argument: str  # "" when not delegated
    colocate_with: str = ""


@dataclass
class Plan:
    tables: dict[str, TablePlan]
    functions: dict[str, FunctionPlan]


def _group(plan: Plan, table: str) -> str:
    """The co-location group of a distributed table: the table its chain of
    ``colocate_with`` ends at."""
    seen = {table}
    while plan.tables[table].colocate_with:
        table = plan.tables[table].colocate_with
        if table in seen or table not in plan.tables:
            break
        seen.add(table)
    return table


def violations(schema: Schema, plan: Plan) -> list[str]:
    """Every way ``schema`` breaks Citus's rules under ``plan``, one key each:
    ``table.constraint`` for a key or foreign key, ``table.column`` for a missing
    distribution column, ``table`` or ``function()`` for an unplanned one, and
    ``function(argument)`` for a function that cannot be delegated as planned."""
    found: list[str] = []
    for name in sorted(schema.tables):
        if name not in plan.tables:
            found.append(name)
    for name in sorted(schema.functions):
        if name not in plan.functions:
            found.append(f"{name}()")
    for name, table in sorted(schema.tables.items()):
        planned = plan.tables.get(name)
        if planned is None:
            continue
        if planned.kind == DISTRIBUTED:
            found.extend(_distributed_table(schema, plan, table, planned))
        for key in table.foreign_keys:
            target = plan.tables.get(key.target)
            if target is None:
                continue
            if planned.kind != DISTRIBUTED and target.kind == DISTRIBUTED:
                found.append(f"{name}.{key.name}")  # a reference or local table -> distributed
            elif planned.kind == DISTRIBUTED and target.kind == LOCAL:
                found.append(f"{name}.{key.name}")
    for name, function in sorted(schema.functions.items()):
        delegated = plan.functions.get(name)
        if delegated is None or not delegated.argument:
            continue
        target = plan.tables.get(delegated.colocate_with)
        table = schema.tables.get(delegated.colocate_with)
        arguments = dict(function.arguments)
        if (
            target is None
            or table is None
            or target.kind != DISTRIBUTED
            or delegated.argument not in arguments
            or arguments[delegated.argument]
            not in COMPATIBLE_TYPES.get(table.columns.get(target.column, ""), set())
        ):
            found.append(f"{name}({delegated.argument})")
    return found


def _distributed_table(schema: Schema, plan: Plan, table: Table, planned: TablePlan) -> list[str]:
    found: list[str] = []
    column = planned.column
    if column not in table.columns:
        found.append(f"{table.name}.{column}")
    first = planned.colocate_with
    if first:
        other = schema.tables.get(first)
        other_plan = plan.tables.get(first)
        if (
            other is None
            or other_plan is None
            or other_plan.kind != DISTRIBUTED
            or (
                column in table.columns
                and other.columns.get(other_plan.column) != table.columns[column]
            )
        ):
            found.append(f"{table.name}.colocate_with")
    for key in table.unique:
        if column not in key.columns:
            found.append(f"{table.name}.{key.name}")
    for key in table.foreign_keys:
        target = plan.tables.get(key.target)
        if target is None or target.kind != DISTRIBUTED:
            continue
        joins_keys = any(
            mine == column and theirs == target.column
            for mine, theirs in zip(key.columns, key.target_columns, strict=True)
        )
        if not joins_keys or _group(plan, table.name) != _group(plan, key.target):
            found.append(f"{table.name}.{key.name}")
    return found


# -- the plan, from the scaling page -------------------------------------------------------

_CELL = re.compile(r"`([^`]*)`")


def _rows(markdown: str, heading: str) -> list[list[str]]:
    """The body rows of the first table after ``heading``, each cell's first code span (or
    its text)."""
    lines = markdown.splitlines()
    start = lines.index(heading)
    rows: list[list[str]] = []
    in_table = False
    for line in lines[start + 1 :]:
        if line.startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not in_table:
                in_table = True  # the header
                continue
            if set("".join(cells)) <= set("-: "):
                continue  # the separator
            rows.append([m.group(1) if (m := _CELL.search(cell)) else cell for cell in cells])
        elif in_table:
            break
    return rows


def plan_from_markdown(path: Path) -> tuple[Plan, list[str]]:
    """The plan in ``path``'s tables "### Tables", "### Functions", and the changes the
    schema needs before it distributes ("### Changes before distributing": the violation
    keys, in its first column)."""
    text = path.read_text()
    tables = {}
    for row in _rows(text, "### Tables"):
        name, kind, column, colocate = row[:4]
        tables[name] = TablePlan(
            kind, "" if column == "—" else column, "" if colocate == "—" else colocate
        )
    functions = {}
    for row in _rows(text, "### Functions"):
        name, argument, colocate = row[:3]
        if argument == NOT_DELEGATED:
            functions[name] = FunctionPlan("")
        else:
            functions[name] = FunctionPlan(argument, colocate)
    changes = [row[0] for row in _rows(text, "### Changes before distributing")]
    return Plan(tables, functions), changes


# -- the schema, from a PostgreSQL catalog -------------------------------------------------


def read_catalog(cursor: Any, tables: Iterable[str], function_prefix: str) -> Schema:
    """The columns, unique keys (constraints and unique indexes) and foreign keys of
    ``tables``, and the input arguments of the functions named ``function_prefix...``,
    as the catalog of ``cursor``'s database has them."""
    names = sorted(tables)
    schema = Schema({}, {})
    cursor.execute(
        "SELECT c.relname, a.attname, format_type(a.atttypid, NULL) FROM pg_attribute a "
        "JOIN pg_class c ON c.oid = a.attrelid WHERE c.relname = ANY(%s) "
        "AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped",
        [names],
    )
    for table, column, type_ in cursor.fetchall():
        schema.tables.setdefault(table, Table(table, {})).columns[column] = type_
    cursor.execute(
        "SELECT c.relname, i.relname, x.indisprimary, ARRAY(SELECT a.attname FROM "
        "unnest(x.indkey) WITH ORDINALITY k(n, o) JOIN pg_attribute a ON a.attrelid = "
        "x.indrelid AND a.attnum = k.n ORDER BY k.o), x.indexprs IS NOT NULL "
        "FROM pg_index x JOIN pg_class c ON c.oid = x.indrelid "
        "JOIN pg_class i ON i.oid = x.indexrelid WHERE c.relname = ANY(%s) AND x.indisunique",
        [names],
    )
    for table, index, primary, columns, expressions in cursor.fetchall():
        # An expression's column is not a column: it cannot be the distribution column.
        shown = (*columns, "(expression)") if expressions else tuple(columns)
        schema.tables[table].unique.append(UniqueKey(index, shown, primary))
    cursor.execute(
        "SELECT c.relname, k.conname, t.relname, ARRAY(SELECT a.attname FROM unnest(k.conkey) "
        "WITH ORDINALITY u(n, o) JOIN pg_attribute a ON a.attrelid = k.conrelid AND "
        "a.attnum = u.n ORDER BY u.o), ARRAY(SELECT a.attname FROM unnest(k.confkey) WITH "
        "ORDINALITY u(n, o) JOIN pg_attribute a ON a.attrelid = k.confrelid AND "
        "a.attnum = u.n ORDER BY u.o) FROM pg_constraint k JOIN pg_class c ON "
        "c.oid = k.conrelid JOIN pg_class t ON t.oid = k.confrelid "
        "WHERE k.contype = 'f' AND c.relname = ANY(%s)",
        [names],
    )
    for table, name, target, columns, target_columns in cursor.fetchall():
        schema.tables[table].foreign_keys.append(
            ForeignKey(name, tuple(columns), target, tuple(target_columns))
        )
    cursor.execute(
        "SELECT p.proname, COALESCE(p.proargnames, '{}'), COALESCE(p.proargmodes::text[], "
        "'{}'), ARRAY(SELECT format_type(t, NULL) FROM unnest(COALESCE(p.proallargtypes, "
        "p.proargtypes::oid[])) t) FROM pg_proc p WHERE p.proname LIKE %s",
        [function_prefix.replace("_", r"\_") + "%"],
    )
    for name, arg_names, modes, types in cursor.fetchall():
        inputs = tuple(
            (arg, type_)
            for i, (arg, type_) in enumerate(zip(arg_names, types, strict=False))
            if not modes or modes[i] in ("i", "b")
        )
        schema.functions[name] = Function(name, inputs)
    return schema


def table_names(models: Iterable[Any]) -> Mapping[str, Any]:
    """The table of each model (concrete, managed)."""
    return {
        model._meta.db_table: model
        for model in models
        if model._meta.managed and not model._meta.proxy
    }
