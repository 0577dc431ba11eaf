"""The schema against Citus's rules for the distribution plan of
``docs/operations/scaling.md`` (``tests/project/distribution.py``): the migrated test
database's catalog breaks them exactly where the page's list of changes says, and the
checker rejects a synthetic schema breaking each rule."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.db import connection

from tests.paths import ROOT
from tests.project.distribution import (
    DISTRIBUTED,
    LOCAL,
    REFERENCE,
    ForeignKey,
    Function,
    FunctionPlan,
    Plan,
    Schema,
    Table,
    TablePlan,
    UniqueKey,
    plan_from_markdown,
    read_catalog,
    table_names,
    violations,
)

PAGE = ROOT / "docs" / "operations" / "scaling.md"


def app_tables() -> list[str]:
    return sorted(table_names(apps.get_app_config("yieldstar").get_models()))


@pytest.mark.postgres
@pytest.mark.django_db
def test_the_schema_breaks_the_rules_exactly_where_the_plan_says() -> None:
    plan, changes = plan_from_markdown(PAGE)
    with connection.cursor() as cursor:
        schema = read_catalog(cursor, app_tables(), "yieldstar_")
    assert sorted(schema.tables) == app_tables(), "every table of the app read"
    assert schema.functions, "the functions of yieldstar_django/sql/ read"
    found = violations(schema, plan)
    assert [v for v in found if v not in changes] == [], (
        "the schema breaks Citus's rules where docs/operations/scaling.md plans nothing: "
        "change the schema, or plan it there (Changes before distributing)"
    )
    assert [c for c in changes if c not in found] == [], (
        "docs/operations/scaling.md lists changes the schema no longer needs: drop them"
    )


def test_the_plan_names_every_table_of_the_app_and_only_those() -> None:
    plan, _ = plan_from_markdown(PAGE)
    assert sorted(plan.tables) == app_tables()


def test_the_plan_names_every_sql_function_and_only_those() -> None:
    plan, _ = plan_from_markdown(PAGE)
    sql = ROOT / "yieldstar_django" / "sql"
    assert sorted(plan.functions) == sorted(p.stem for p in sql.glob("yieldstar_*.sql"))


@pytest.mark.postgres
@pytest.mark.django_db
def test_a_unique_index_without_the_distribution_column_would_fail() -> None:
    """What the first test does with a schema that a change made harder to distribute:
    a unique index on the heap that lacks ``execution_id`` (rolled back with the test)."""
    plan, changes = plan_from_markdown(PAGE)
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE UNIQUE INDEX yieldstar_step_by_key ON yieldstar_execution_step (step_key, id)"
        )
        schema = read_catalog(cursor, app_tables(), "yieldstar_")
    unplanned = [v for v in violations(schema, plan) if v not in changes]
    assert unplanned == ["yieldstar_execution_step.yieldstar_step_by_key"]


def test_the_plan_is_read_from_the_page() -> None:
    plan, changes = plan_from_markdown(PAGE)
    assert plan.tables["yieldstar_waiter"] == TablePlan(
        DISTRIBUTED, "store_id", "yieldstar_storeinstance"
    )
    assert plan.tables["yieldstar_execution"] == TablePlan(DISTRIBUTED, "id")
    assert plan.tables["yieldstar_idempotencykey"] == TablePlan(LOCAL)
    assert plan.functions["yieldstar_commit_mutation_v4"] == FunctionPlan(
        "p_store_id", "yieldstar_storeinstance"
    )
    assert plan.functions["yieldstar_write_intents_v1"] == FunctionPlan("")
    assert "yieldstar_waiter.store_id" in changes


# -- the checker on synthetic schemas ------------------------------------------------------


def good() -> tuple[Schema, Plan]:
    """Two co-located distributed tables, a reference table and a local one, and a
    delegated function: every rule kept."""
    stores = Table(
        "stores",
        {"id": "bigint", "store_id": "character varying", "name": "character varying"},
        [UniqueKey("stores_pkey", ("store_id", "id"), True), UniqueKey("k", ("name", "store_id"))],
    )
    waiters = Table(
        "waiters",
        {"id": "bigint", "store_id": "character varying", "store_pk": "bigint", "kind": "int"},
        [UniqueKey("waiters_pkey", ("store_id", "id"), True)],
        [
            ForeignKey("to_store", ("store_id", "store_pk"), "stores", ("store_id", "id")),
            ForeignKey("to_kind", ("kind",), "kinds", ("id",)),
        ],
    )
    kinds = Table("kinds", {"id": "int"}, [UniqueKey("kinds_pkey", ("id",), True)])
    keys = Table("keys", {"id": "bigint"}, [UniqueKey("keys_pkey", ("id",), True)])
    commit = Function("commit", (("p_name", "text"), ("p_store_id", "text")))
    pure = Function("pure", (("a", "text"),))
    schema = Schema(
        {t.name: t for t in (stores, waiters, kinds, keys)}, {"commit": commit, "pure": pure}
    )
    plan = Plan(
        {
            "stores": TablePlan(DISTRIBUTED, "store_id"),
            "waiters": TablePlan(DISTRIBUTED, "store_id", "stores"),
            "kinds": TablePlan(REFERENCE),
            "keys": TablePlan(LOCAL),
        },
        {"commit": FunctionPlan("p_store_id", "stores"), "pure": FunctionPlan("")},
    )
    return schema, plan


def test_a_schema_that_keeps_every_rule_passes() -> None:
    assert violations(*good()) == []


def test_a_unique_key_without_the_distribution_column_is_refused() -> None:
    schema, plan = good()
    schema.tables["stores"].unique.append(UniqueKey("by_name", ("name",)))
    schema.tables["waiters"].unique[0] = UniqueKey("waiters_pkey", ("id",), True)
    assert violations(schema, plan) == ["stores.by_name", "waiters.waiters_pkey"]


def test_a_unique_expression_index_is_refused() -> None:
    schema, plan = good()
    schema.tables["stores"].unique.append(UniqueKey("lower", ("(expression)",)))
    assert violations(schema, plan) == ["stores.lower"]


def test_a_missing_distribution_column_is_refused() -> None:
    schema, plan = good()
    del schema.tables["waiters"].columns["store_id"]
    assert "waiters.store_id" in violations(schema, plan)


def test_a_foreign_key_that_does_not_join_the_distribution_columns_is_refused() -> None:
    schema, plan = good()
    schema.tables["waiters"].foreign_keys[0] = ForeignKey(
        "to_store", ("store_pk",), "stores", ("id",)
    )
    assert violations(schema, plan) == ["waiters.to_store"]
    # Both columns, but crossed over: not the distribution columns joined.
    schema.tables["waiters"].foreign_keys[0] = ForeignKey(
        "to_store", ("store_id", "store_pk"), "stores", ("id", "store_id")
    )
    assert violations(schema, plan) == ["waiters.to_store"]


def test_a_foreign_key_between_tables_not_co_located_is_refused() -> None:
    schema, plan = good()
    plan.tables["waiters"] = TablePlan(DISTRIBUTED, "store_id")
    assert violations(schema, plan) == ["waiters.to_store"]


def test_co_located_tables_need_one_type_of_distribution_column() -> None:
    schema, plan = good()
    schema.tables["waiters"].columns["store_id"] = "bigint"
    assert violations(schema, plan) == ["waiters.colocate_with"]


def test_a_local_or_reference_table_may_not_reference_a_distributed_one() -> None:
    schema, plan = good()
    schema.tables["keys"].foreign_keys.append(ForeignKey("keys_store", ("id",), "stores", ("id",)))
    schema.tables["waiters"].foreign_keys.append(
        ForeignKey("to_key", ("store_pk",), "keys", ("id",))
    )
    assert violations(schema, plan) == ["keys.keys_store", "waiters.to_key"]


def test_a_delegated_function_without_the_distribution_argument_is_refused() -> None:
    schema, plan = good()
    schema.functions["commit"] = Function("commit", (("p_name", "text"), ("p_store_pk", "bigint")))
    assert violations(schema, plan) == ["commit(p_store_id)"]
    # The argument is there, of a type that is not the distribution column's.
    schema.functions["commit"] = Function("commit", (("p_store_id", "bigint"),))
    assert violations(schema, plan) == ["commit(p_store_id)"]
    # Or co-located with a table that is not distributed.
    schema.functions["commit"] = Function("commit", (("p_store_id", "text"),))
    plan.functions["commit"] = FunctionPlan("p_store_id", "keys")
    assert violations(schema, plan) == ["commit(p_store_id)"]


def test_an_unplanned_table_or_function_is_refused() -> None:
    schema, plan = good()
    schema.tables["new"] = Table("new", {"id": "bigint"})
    schema.functions["new_fn"] = Function("new_fn", ())
    assert violations(schema, plan) == ["new", "new_fn()"]
