"""The executions admin's patch decision filter: which executions ``step.patched(...)``
kept on the old branch (or sent down the new one).

A decision is a heap row keyed ``patch:<change id>`` of kind ``patch`` whose value is
``true`` or ``false`` (:mod:`yieldstar_django.runtime.patches`). The filter takes the
change id as typed (``?patch=confirmation-mail``) and a decision (``&patched=false``; none:
either), and keeps the executions holding such a row: ``id IN (the heap's matching patch
rows)``, which the heap's partial index on its patch rows (``yieldstar_step_patch_idx``)
answers without reading any other heap row or every execution (an ``EXISTS`` would have
SQLite probe the heap once per execution instead).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.db.models import QuerySet
from django.http import HttpRequest

from ..models.runtime import ExecutionStep, StepKind
from ..runtime.patches import PATCH_KEY_PREFIX, patch_key

#: The decisions a patch records (its row's ``value_json``), as the filter offers them.
DECISIONS: Final = {"false": "false: kept on the old branch", "true": "true: the new branch"}


class PatchDecisionFilter(admin.ListFilter):
    """Executions with a recorded decision of ``step.patched(<change id>)``: the id in the
    ``patch`` parameter (a leading ``patch:`` is allowed), the decision in ``patched``
    (``false``, ``true``, or empty for either). An empty id filters nothing; another
    decision is refused as Django refuses a lookup it cannot apply (the list with ``?e=1``).
    """

    title = "patch decision"
    template = "yieldstar_django/admin/patch_filter.html"
    change_parameter: Final = "patch"
    decision_parameter: Final = "patched"

    def __init__(
        self, request: HttpRequest, params: dict[str, list[str]], model: Any, model_admin: Any
    ) -> None:
        super().__init__(request, params, model, model_admin)
        for name in (self.change_parameter, self.decision_parameter):
            if name in params:
                self.used_parameters[name] = params.pop(name)[-1]
        #: The change id asked for, without a ``patch:`` the user may have typed.
        self.change_id = str(self.used_parameters.get(self.change_parameter, "")).strip()
        self.change_id = self.change_id.removeprefix(PATCH_KEY_PREFIX)
        #: ``"true"``, ``"false"``, or ``""`` for either.
        self.decision = str(self.used_parameters.get(self.decision_parameter, ""))
        if self.decision not in {"", *DECISIONS}:
            raise IncorrectLookupParameters(
                f"A patch decision is true or false, not {self.decision!r}."
            )

    def has_output(self) -> bool:
        return True

    def expected_parameters(self) -> list[str | None]:
        return [self.change_parameter, self.decision_parameter]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if not self.change_id:
            return queryset
        rows = ExecutionStep.objects.filter(kind=StepKind.PATCH, step_key=patch_key(self.change_id))
        if self.decision:
            rows = rows.filter(value_json=self.decision)
        return queryset.filter(pk__in=rows.values("execution_id"))

    def choices(self, changelist: Any) -> Iterator[dict[str, Any]]:
        """One choice: what the template's form needs (the other parameters of the list
        kept as hidden fields, the link that clears this filter)."""
        mine = set(self.expected_parameters())
        yield {
            "change_id": self.change_id,
            "decisions": [
                {"value": value, "display": display, "selected": value == self.decision}
                for value, display in [("", "either"), *DECISIONS.items()]
            ],
            "hidden": [
                (name, value)
                for name, values in changelist.filter_params.items()
                if name not in mine
                for value in values
            ],
            "clear_url": changelist.get_query_string(remove=list(mine)),
            "selected": bool(self.change_id),
        }


__all__ = ["DECISIONS", "PatchDecisionFilter"]
