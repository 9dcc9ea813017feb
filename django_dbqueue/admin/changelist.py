"""The queue's changelist: the page query stays on the queue table.

Django's changelist joins the related tables of ``list_select_related`` (or of a ForeignKey
in ``list_display``) into the page query. On a big queue table that join changes the plan:
measured on the example shop at 300,000 orders, the unfiltered list took 838 ms with the
``customer`` join and 2 ms without it (the database no longer walks the primary key and stops
after one page). ``QueueChangeList`` keeps the page query on the queue table whatever
``list_select_related`` says, and fetches the related rows of the page's rows only, with one
``WHERE pk IN (…)`` per relation (``prefetch_related``) — the same objects on the page, no
query per row. Counting and bulk actions never join either.

A list filtered by a date range on a column that leads an index is ordered by that column,
newest first (unless a column header asks for another order). In key order the database walks
the primary key until it finds a page of rows in the range, and the rows of a range are rarely
the newest keys: at 10,000,000 orders, a three-day range of ``queue_finished_at`` walked 1.3
million keys per page. In the column's order the index holds the range in order: one seek, then
a page of entries (docs/admin-pages.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from django.contrib.admin.views.main import ORDER_VAR, PAGE_VAR, ChangeList
from django.core.exceptions import FieldDoesNotExist
from django.db import models

from .filters import filter_errors
from .keyset import KEY_VAR
from .pagination import EstimatedCountPaginator


def related_to_fetch(changelist: ChangeList) -> list[str]:
    """The relations Django would have joined into the page query (``select_related``)."""
    opts = changelist.lookup_opts
    wanted = changelist.list_select_related
    if wanted is True or (wanted is False and _foreign_key_in_list_display(changelist)):
        names = []
        for name in changelist.list_display if wanted is False else [f.name for f in opts.fields]:
            try:
                field = opts.get_field(name) if isinstance(name, str) else None
            except FieldDoesNotExist:
                continue
            # select_related() with no names follows the non-null foreign keys; a ForeignKey
            # named in list_display (not its ``_id`` column) needs its row.
            if field is not None and field.many_to_one and (wanted is False or not field.null):
                if name != cast(models.Field, field).attname and field.name not in names:
                    names.append(field.name)
        return names
    return list(wanted or ())


def _foreign_key_in_list_display(changelist: ChangeList) -> bool:
    # What Django asks before it joins (its own helper for this was renamed in 6.1).
    for name in changelist.list_display:
        try:
            field = changelist.lookup_opts.get_field(name) if isinstance(name, str) else None
        except FieldDoesNotExist:
            continue
        if field is not None and field.many_to_one and name != cast(models.Field, field).attname:
            return True
    return False


def leads_an_index(opts: Any, field: models.Field) -> bool:
    """Whether an index of the model starts with ``field`` (its own, or one of Meta.indexes)."""
    # Field.db_index is set by Field.__init__ but missing from django-stubs.
    if getattr(field, "db_index", False) or field.unique or field.primary_key:
        return True
    return any(index.fields and index.fields[0].lstrip("-") == field.name for index in opts.indexes)


def ranged_date_column(changelist: ChangeList) -> str | None:
    """The indexed date column a range filter of the changelist is restricting, if any
    (django-admin-rangefilter's parameters: ``<field>__range__gte_0``, ``…__lte_0``)."""
    opts = changelist.lookup_opts
    for field in opts.concrete_fields:
        if not isinstance(field, models.DateField):  # DateTimeField is a DateField
            continue
        prefix = f"{field.name}__range__"
        if any(key.startswith(prefix) and value for key, value in changelist.params.items()):
            return field.name if leads_an_index(opts, field) else None
    return None


class RangeOrderedChangeList(ChangeList):
    """A changelist whose date-range filter on an indexed column orders it by that column,
    newest first (the module's docstring says why); the package's read-only lists (the attempt
    history) use it as it is, the queue's changelist below adds to it."""

    def get_ordering(self, request: Any, queryset: models.QuerySet) -> list[Any]:
        ordering = super().get_ordering(request, queryset)
        if self.params.get(ORDER_VAR):  # a column header chose the order
            return ordering
        column = ranged_date_column(self)
        return [f"-{column}", "-pk"] if column else ordering


class QueueChangeList(RangeOrderedChangeList):
    def get_filters_params(self, params: dict[str, Any] | None = None) -> dict[str, Any]:
        # A page link's cursor is not a filter (Django would look for a field of that name).
        lookup_params = super().get_filters_params(params)
        lookup_params.pop(KEY_VAR, None)
        return lookup_params

    def get_query_string(
        self, new_params: dict[str, Any] | None = None, remove: Iterable[str] | None = None
    ) -> str:
        # Every link drops the cursor of the page shown (it fits that page's neighbours only,
        # not another filter or order); a link to a neighbouring page gets its own.
        new_params = {KEY_VAR: None, **(new_params or {})}
        paginator = getattr(self, "paginator", None)
        target = new_params.get(PAGE_VAR)
        if isinstance(paginator, EstimatedCountPaginator) and isinstance(target, int):
            new_params[KEY_VAR] = paginator.link_cursor(target)
        return super().get_query_string(new_params, remove)

    def apply_select_related(self, qs: models.QuerySet) -> models.QuerySet:
        related = related_to_fetch(self)
        return qs.prefetch_related(*related) if related else qs

    @property
    def dbqueue_filter_errors(self) -> list[str]:
        return filter_errors(self)
