"""Pages of a list ordered by its integer primary key, found by key instead of by OFFSET.

An OFFSET makes the database walk every row it skips: the middle page of 1,000,000 orders
walks 500,000 index entries (on MariaDB, InnoDB's clustered index: whole rows). A list whose
order is its primary key can be entered at any key with an index seek instead. Two ways:

* **A link to a neighbouring page carries the edge of the page it is on**
  (``?p=5001&dbq_from=5001a123456``: page 5001 holds the rows after key 123456), so paging
  forwards or backwards shows each row once, in order, however the keys are spread, and costs
  one index seek whatever the depth. The page number stays in the link: Django's ``?p=N``
  links keep working, and a cursor that does not fit the request (another page, a bad key) is
  ignored.
* **A page typed or linked by number alone, deep in an estimated list** (the list's count is
  itself an estimate) is placed by interpolating its position between the list's first and
  last keys: exact where keys are dense, close where deletes left gaps — as close as the
  estimated count it is a page of. Pages within ``offset_limit`` rows of either end are still
  counted by OFFSET, so the first and the last pages are always the true ends.
"""

from __future__ import annotations

import re
from typing import Any

from django.db import models
from django.db.models import QuerySet

#: The query-string parameter of a page link that continues from a neighbouring page's edge.
KEY_VAR = "dbq_from"

#: ``<page>a<key>``: the page's rows come after ``key`` in the list's order; ``b``: before it.
_CURSOR = re.compile(r"(?P<page>[1-9][0-9]{0,9})(?P<side>[ab])(?P<key>-?[0-9]{1,19})")


def key_order(qs: QuerySet) -> bool | None:
    """True if ``qs`` is ordered by its integer primary key descending, False if ascending,
    None if its order is anything else (then pages are counted by OFFSET)."""
    order = qs.query.order_by
    if len(order) != 1 or not isinstance(order[0], str) or qs.query.extra_order_by:
        return None
    name = order[0].removeprefix("-")
    pk = qs.model._meta.pk
    # AutoField and BigAutoField are IntegerFields; interpolating needs numbers.
    if pk is None or not isinstance(pk, models.IntegerField) or name not in ("pk", pk.name, pk.attname):
        return None
    return order[0].startswith("-")


def cursor_text(page: int, after: bool, key: Any) -> str:
    return f"{page}{'a' if after else 'b'}{int(key)}"


def parse_cursor(cursor: str | None, number: int) -> tuple[bool, int] | None:
    """(after, key) of a cursor made for page ``number``; None for another page's or a
    malformed one (it is then ignored: the page is found by its number)."""
    found = _CURSOR.fullmatch(cursor or "")
    if found is None or int(found["page"]) != number:
        return None
    return found["side"] == "a", int(found["key"])


def keys_from_cursor(qs: QuerySet, after: bool, key: int, size: int) -> list[Any]:
    """The keys of the ``size`` rows right after (or before) ``key`` in the list's order."""
    descending = bool(key_order(qs))
    # "After" in a descending list is towards smaller keys; "before" towards larger ones.
    rows = qs.filter(pk__lt=key) if after == descending else qs.filter(pk__gt=key)
    if after:
        return list(rows.values_list("pk", flat=True)[:size])
    keys = list(rows.reverse().values_list("pk", flat=True)[:size])  # the nearest ones
    keys.reverse()
    return keys


def keys_by_position(qs: QuerySet, position: int, count: int, size: int) -> list[Any]:
    """The keys of the ``size`` rows from about ``position`` (0-based) of ``count``: the first
    and last keys bound the list (two LIMIT 1 seeks), the page starts at the key that far
    between them and is read with one more seek."""
    descending = key_order(qs)
    keys = qs.values_list("pk", flat=True)
    first, last = list(keys[:1]), list(keys.reverse()[:1])
    if descending is None or not first or not last or count <= 0:
        return []
    span = abs(last[0] - first[0]) + 1
    step = span * min(position, count) // count
    if descending:
        return list(keys.filter(pk__lte=first[0] - step)[:size])
    return list(keys.filter(pk__gte=first[0] + step)[:size])
