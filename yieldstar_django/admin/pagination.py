"""A paginator for admin lists over tables of millions of rows.

Django's admin counts the rows of every list page (``COUNT(*)``), which on PostgreSQL scans
the whole table. :class:`EstimatedCountPaginator` answers the count of an unfiltered list
from the planner's estimate (``pg_class.reltuples``) when the table is big, and counts a
filtered list only up to ``count_cap`` rows (``SELECT COUNT(*) FROM (... LIMIT n)``). Page
numbers past an estimate may be empty and pages past the cap are not linked: narrow the
list with a filter or a search instead. Pair it with ``show_full_result_count = False``.
"""

from __future__ import annotations

from typing import Any

from django.core.paginator import Page, Paginator
from django.db import connections
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.functional import cached_property

from ..sql import queries


def estimated_rows(queryset: QuerySet[Any]) -> int | None:
    """The planner's row estimate of the queryset's table on PostgreSQL, else ``None``
    (also when the table was never analyzed)."""
    connection = connections[queryset.db]
    if connection.vendor != "postgresql":
        return None
    table = connection.ops.quote_name(queryset.model._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(queries.of(connection).estimated_rows, [table])
        row = cursor.fetchone()
    if row is None or row[0] is None or row[0] < 0:
        return None
    return int(row[0])


def is_unfiltered(queryset: QuerySet[Any]) -> bool:
    """Whether the queryset selects every row of its table."""
    query = queryset.query
    return not query.where and not query.combinator and not query.distinct


class EstimatedCountPaginator(Paginator):  # type: ignore[type-arg]
    """A ``Paginator`` whose ``count`` never scans a big table (see the module docstring)."""

    #: An unfiltered table estimated larger than this uses the estimate.
    estimate_threshold = 10_000
    #: A filtered list is counted up to this many rows.
    count_cap = 10_000

    @cached_property
    def count(self) -> int:
        object_list = self.object_list
        if not isinstance(object_list, QuerySet):
            return super().count
        if is_unfiltered(object_list):
            estimate = estimated_rows(object_list)
            if estimate is not None and estimate > self.estimate_threshold:
                return estimate
        return object_list.order_by().values("pk")[: self.count_cap + 1].count()


def paginate(request: HttpRequest, queryset: QuerySet[Any], param: str, per_page: int) -> Page[Any]:
    """The page of ``queryset`` named by the ``param`` query parameter (a section of a
    change page: a store's versions, an execution's steps)."""
    return EstimatedCountPaginator(queryset, per_page).get_page(request.GET.get(param))


__all__ = ["EstimatedCountPaginator", "estimated_rows", "is_unfiltered", "paginate"]
