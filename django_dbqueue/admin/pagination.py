"""A paginator that never runs a full ``COUNT(*)`` over a big queue table.

The admin changelist counts its rows on every page view. At a million rows an exact count is
the slowest statement of the page (InnoDB has no stored row count), while operators only need
the order of magnitude to page through. So:

* an unfiltered list takes the table's row estimate from the database statistics
  (``information_schema.TABLES.TABLE_ROWS`` on MySQL/MariaDB, ``pg_class.reltuples`` on
  PostgreSQL) when it is above ``exact_limit``;
* a filtered list counts exactly up to ``exact_limit`` (``SELECT COUNT(*) FROM (SELECT … LIMIT
  n+1)``, which stops early) and, above it, takes the planner's row estimate (``EXPLAIN``);
* a page is read as its rows' keys first, then the rows by key (see ``page()``), and a page in
  the second half of an estimated list is read from the list's end (the reversed ordering with a
  small OFFSET), so the last pages cost what the first ones do instead of an OFFSET over the
  whole table (1.1 s for the last page of 1,000,000 orders on MariaDB). Such pages are counted
  from the end: with an estimate they are the true last rows;
* in a list ordered by its integer key, the links to the neighbouring pages carry the shown
  page's edge and pages deeper than ``offset_limit`` rows are placed by key (:mod:`.keyset`):
  no OFFSET walks half the table for the middle page.

``estimated`` tells templates that the count is approximate (``at_least`` that it is only
known to be above ``exact_limit``); :func:`count_text` says so in words. SQLite has no cheap
estimate: it counts exactly, like Django.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.paginator import Paginator
from django.db.models import Model, QuerySet
from django.utils.functional import cached_property
from django.utils.translation import gettext as _

from ..backends import backend_for
from .display import number
from .keyset import cursor_text, key_order, keys_by_position, keys_from_cursor, parse_cursor

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise


class EstimatedCountPaginator(Paginator):
    #: Counts up to this many rows are exact; larger ones are estimates.
    exact_limit = 10_000

    #: Pages more than this many rows from both ends of an estimated list ordered by its
    #: integer primary key are placed by key (:mod:`.keyset`) instead of by OFFSET.
    offset_limit = 10_000

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.estimated = False
        self.at_least = False
        #: The request's page cursor (``keyset.KEY_VAR``), set by ``QueueAdminMixin.get_paginator``.
        self.cursor: str | None = None
        #: The first and last keys of the page read last (in the list's order), and its number.
        self.edges: tuple[Any, Any] | None = None
        self.shown: int | None = None

    @cached_property
    def count(self) -> int:
        qs = self.object_list
        if not isinstance(qs, QuerySet):
            return super().count
        if not qs.query.has_filters():
            estimate = table_row_estimate(qs.model, qs.db)
            if estimate is not None and estimate > self.exact_limit:
                self.estimated = True
                return estimate
            return qs.count()
        capped = qs.order_by()[: self.exact_limit + 1].count()
        if capped <= self.exact_limit:
            return capped
        self.estimated = True
        planned = plan_row_estimate(qs)
        if planned is None or planned <= self.exact_limit:
            self.at_least = True  # the planner does not know (a join, SQLite): say "more than"
            return self.exact_limit + 1
        return planned

    def page(self, number: Any) -> Any:
        """A page read in two steps: the keys of its rows (a narrow query that the database
        can answer from an index, even through the joins of a filter), then its rows by key,
        in the list's order. Sorting whole rows (their text columns included) to find one page
        is what made a filtered page of the example shop take 0.6 s at 1,000,000 orders."""
        qs = self.object_list
        if not isinstance(qs, QuerySet):
            return super().page(number)
        number = self.validate_number(number)
        cursor = parse_cursor(self.cursor, number) if key_order(qs) is not None else None
        if cursor is not None and 1 < number < self.num_pages:  # the first and last: true ends
            keys = keys_from_cursor(qs, *cursor, self.per_page)
            # A page past the rows (the estimate was high) hands its cursor on: no row twice.
            self.edges = (keys[0], keys[-1]) if keys else (cursor[1], cursor[1])
        else:
            keys = self._keys(qs, number)
            self.edges = (keys[0], keys[-1]) if keys else None
        self.shown = number
        # Paginator._get_page() is Django's hook for the Page class; the stubs lack it.
        return self._get_page(qs.filter(pk__in=keys), number, self)  # type: ignore[attr-defined]

    def _keys(self, qs: QuerySet, number: int) -> list[Any]:
        bottom = (number - 1) * self.per_page
        top = bottom + self.per_page
        if top + self.orphans >= self.count:
            top = self.count
        if self.estimated and min(bottom, self.count - top) > self.offset_limit and key_order(qs) is not None:
            # Deep in an estimated list ordered by key: placed by key, not by an OFFSET.
            return keys_by_position(qs, bottom, self.count, top - bottom)
        if self.estimated and qs.ordered and bottom > self.count // 2:
            # Read from the end: skip the rows after this page in the reversed order.
            after = self.count - top
            keys = list(qs.reverse().values_list("pk", flat=True)[after : after + top - bottom])
            return keys[::-1]  # in the list's order (its edges make the neighbours' cursors)
        return list(qs.values_list("pk", flat=True)[bottom:top])

    def link_cursor(self, number: int) -> str | None:
        """The cursor a link to page ``number`` carries from the page shown (its neighbours
        only: they continue from its first or last row), or None."""
        if self.edges is None or self.shown is None or abs(number - self.shown) != 1:
            return None
        if number in (1, self.num_pages):  # the ends are found by number: no cursor to carry
            return None
        if not isinstance(self.object_list, QuerySet) or key_order(self.object_list) is None:
            return None
        after = number > self.shown
        return cursor_text(number, after, self.edges[1] if after else self.edges[0])


def count_hint(paginator: EstimatedCountPaginator) -> str:
    """An estimated count in words: "about 300,436, an estimate", "more than 10,000"."""
    if paginator.at_least:
        return _("more than %(n)s") % {"n": number(paginator.exact_limit)}
    return _("about %(n)s, an estimate") % {"n": number(paginator.count)}


def results_text(paginator: EstimatedCountPaginator) -> str:
    """The search bar's "N results", an estimate marked as one."""
    if paginator.at_least:
        return _("More than %(n)s results") % {"n": number(paginator.exact_limit)}
    return _("About %(n)s results (an estimate)") % {"n": number(paginator.count)}


def count_text(paginator: EstimatedCountPaginator, names: StrOrPromise) -> str:
    """The list's row count in words, an estimate marked as one."""
    values = {"n": number(paginator.count), "names": names, "limit": number(paginator.exact_limit)}
    if paginator.at_least:
        return (
            _("More than %(limit)s %(names)s (lists above %(limit)s rows are not counted exactly)") % values
        )
    return (
        _("About %(n)s %(names)s (an estimate: lists above %(limit)s rows are not counted exactly)") % values
    )


def table_row_estimate(model: type[Model], using: str) -> int | None:
    """The database's statistics estimate of the table's rows, or None if it has none."""
    return backend_for(using).table_row_estimate(model._meta.db_table)


def plan_row_estimate(qs: QuerySet) -> int | None:
    """The planner's estimate of the rows ``qs`` returns (single-table plans), or None."""
    return backend_for(qs.db).plan_row_estimate(qs.order_by())
