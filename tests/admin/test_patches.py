"""The executions admin's patch decision filter: the executions ``step.patched(...)`` kept
on the old branch (``false``) or sent down the new one (``true``), as the versioning how-to
tells an operator to watch them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
from django.contrib import admin
from django.db import connections
from django.test import Client, RequestFactory
from django.urls import reverse

from yieldstar_django.admin.patches import PatchDecisionFilter
from yieldstar_django.models import Execution, ExecutionStep
from yieldstar_django.runtime import Step, get_execution, start_workflow
from yieldstar_django.runtime.registry import unregister_workflow, workflow
from yieldstar_django.testing.pytest_plugin import YieldstarHelper

from .conftest import count_queries

EXECUTIONS = reverse("admin:yieldstar_execution_changelist")
CHANGE = "confirmation-mail"

pytestmark = pytest.mark.django_db


def reserve() -> str:
    return "reserved"


def send() -> str:
    return "sent"


def ship() -> str:
    return "shipped"


@pytest.fixture
def deployed(yieldstar: YieldstarHelper) -> Iterator[dict[str, str]]:
    """The how-to's deploy: ``old`` sleeps in release 1 when release 2 wraps a new step in
    ``step.patched(CHANGE)``; ``new`` starts under release 2; ``other`` never reaches a
    patch. Ids by role, once all three completed."""
    release = {"n": 1}

    @workflow("admin-fulfil")
    def fulfil(step: Step, order_id: str) -> Any:
        done = [(yield from step.run(reserve))]
        if release["n"] == 2 and (yield from step.patched(CHANGE)):
            done.append((yield from step.run(send)))
        yield from step.sleep(3600)
        done.append((yield from step.run(ship)))
        return done

    @workflow("admin-plain")
    def plain(step: Step) -> Any:
        return (yield from step.run(ship))

    try:
        old = start_workflow(fulfil, "o-1", execution_id="patch-old")
        yieldstar.run_until_idle()
        assert get_execution(old).status == "sleeping"
        release["n"] = 2
        new = start_workflow(fulfil, "o-2", execution_id="patch-new")
        other = start_workflow(plain, execution_id="patch-other")
        yieldstar.run_until_idle()
        yieldstar.advance_time(3600)
        yieldstar.run_until_idle()
        assert get_execution(old).result == ["reserved", "shipped"]
        assert get_execution(new).result == ["reserved", "sent", "shipped"]
        assert get_execution(other).status == "completed"
        yield {"old": old, "new": new, "other": other}
    finally:
        unregister_workflow("admin-fulfil")
        unregister_workflow("admin-plain")


def listed(client: Client, **params: str) -> set[str]:
    """The execution ids the list shows for ``params``."""
    response = client.get(f"{EXECUTIONS}?{urlencode(params)}")
    assert response.status_code == 200
    return set(response.context["cl"].result_list.values_list("id", flat=True))


def test_finds_executions_by_recorded_decision(
    admin_client: Client, deployed: dict[str, str]
) -> None:
    everything = {deployed["old"], deployed["new"], deployed["other"]}
    assert listed(admin_client, patch=CHANGE, patched="false") == {deployed["old"]}
    assert listed(admin_client, patch=CHANGE, patched="true") == {deployed["new"]}
    assert listed(admin_client, patch=CHANGE) == {deployed["old"], deployed["new"]}
    assert listed(admin_client, patch=CHANGE, patched="") == {deployed["old"], deployed["new"]}
    # The heap key as the how-to writes it, and surrounding blanks, name the same change.
    assert listed(admin_client, patch=f" patch:{CHANGE} ", patched="false") == {deployed["old"]}
    assert listed(admin_client, patch="another-change", patched="false") == set()
    assert listed(admin_client, patch="", patched="false") == everything
    # With the other filters: the old branch's executions still in flight (none here).
    assert listed(admin_client, patch=CHANGE, patched="false", status__exact="waiting") == set()
    assert listed(admin_client, patch=CHANGE, patched="false", status__exact="completed") == {
        deployed["old"]
    }


def test_only_patch_rows_count(admin_client: Client, deployed: dict[str, str]) -> None:
    """A heap row of another kind whose key reads like a patch's is no decision."""
    ExecutionStep.objects.create(
        execution_id=deployed["other"],
        step_key=f"patch:{CHANGE}",
        position=9,
        kind="run",
        status="completed",
        value_json="false",
    )
    assert listed(admin_client, patch=CHANGE, patched="false") == {deployed["old"]}


def patch_form(page: str) -> str:
    """The patch decision filter's form in a list page."""
    start = page.index('class="yieldstar-patch-filter"')
    return page[start : page.index("</form>", start)]


def test_the_sidebar_form_keeps_the_other_filters(
    admin_client: Client, deployed: dict[str, str]
) -> None:
    query = urlencode({"status__exact": "completed", "patch": CHANGE, "patched": "false", "p": 1})
    page = admin_client.get(f"{EXECUTIONS}?{query}").content.decode()
    assert "By patch decision" in page and "Clear all filters" in page
    form = patch_form(page)
    assert f'name="patch" value="{CHANGE}"' in form
    assert '<option value="false" selected>' in form
    # The other filters ride along; this filter's own values, and the page, do not.
    assert '<input type="hidden" name="status__exact" value="completed">' in form
    assert form.count('type="hidden"') == 1
    assert f'href="?{urlencode({"status__exact": "completed"})}"' in form  # "all executions"
    bare = patch_form(admin_client.get(EXECUTIONS).content.decode())
    assert 'name="patch" value=""' in bare and "selected" not in bare.replace(
        '<option value="" selected>', ""
    )


@pytest.mark.parametrize("decision", ["maybe", "False", "0"])
def test_another_decision_is_refused_as_django_refuses_a_bad_lookup(
    admin_client: Client, deployed: dict[str, str], decision: str
) -> None:
    response = admin_client.get(f"{EXECUTIONS}?{urlencode({'patch': CHANGE, 'patched': decision})}")
    assert response.status_code == 302
    assert response["Location"].endswith("?e=1")


def test_a_nul_in_the_change_id_is_refused(admin_client: Client, deployed: dict[str, str]) -> None:
    response = admin_client.get(f"{EXECUTIONS}?patch=a%00b&patched=false")
    assert response.status_code == 302 and response["Location"].endswith("?e=1")


def test_the_filter_adds_one_subquery_not_a_query_per_row(
    admin_client: Client, deployed: dict[str, str]
) -> None:
    bare, _ = count_queries(admin_client, EXECUTIONS)
    filtered, _ = count_queries(admin_client, f"{EXECUTIONS}?patch={CHANGE}&patched=false")
    assert filtered <= bare  # (the unfiltered list may ask for the table's estimate too)


@pytest.mark.django_db(databases=["default", "sqlite"])
@pytest.mark.parametrize("alias", ["default", "sqlite"])
def test_the_patch_index_answers_the_filter(alias: str) -> None:
    """The filtered list reads the heap through ``yieldstar_step_patch_idx`` (PostgreSQL
    with sequential scans off, since its tables are tiny here)."""
    request = RequestFactory().get(EXECUTIONS)
    model_admin = admin.site._registry[Execution]
    for decision in ("false", ""):
        spec = PatchDecisionFilter(
            request, {"patch": [CHANGE], "patched": [decision]}, Execution, model_admin
        )
        queryset = spec.queryset(request, Execution.objects.using(alias).order_by("-created_at"))
        with connections[alias].cursor() as cursor:
            if connections[alias].vendor == "postgresql":
                cursor.execute("SET LOCAL enable_seqscan = off")
            plan = queryset[:100].explain()
        assert "yieldstar_step_patch_idx" in plan, plan


def test_in_flight_or_finished(admin_client: Client, deployed: dict[str, str]) -> None:
    """The how-to's step 4 as one filter: the old branch's executions still in flight."""
    Execution.objects.filter(pk=deployed["old"]).update(status="sleeping", finished_at=None)
    assert listed(admin_client, patch=CHANGE, patched="false", finished="no") == {deployed["old"]}
    assert listed(admin_client, patch=CHANGE, patched="false", finished="yes") == set()
    assert listed(admin_client, finished="yes") == {deployed["new"], deployed["other"]}
    assert listed(admin_client, finished="no") == {deployed["old"]}
    page = admin_client.get(EXECUTIONS).content.decode()
    assert "?finished=no" in page and "in flight" in page


def test_an_unknown_finished_choice_filters_nothing(
    admin_client: Client, deployed: dict[str, str]
) -> None:
    assert listed(admin_client, finished="maybe") == set(deployed.values())
