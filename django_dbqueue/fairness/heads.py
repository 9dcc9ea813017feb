"""The bounded fair claim's reads: the keys with work, and the first rows of chosen keys.

Two statements, both read through the fair index (``(queue_state, key, -queue_priority,
queue_run_at, pk)``, asked for by check W051) and never more rows than they return, give or
take the keys' future rows:

* :meth:`Walker.walk` — the next keys with READY rows after a bound, in key order (the backend's
  :meth:`~django_dbqueue.backends.base.QueueBackend.fair_keys_sql`: a loose index scan on
  MySQL and MariaDB, a recursive skip scan on PostgreSQL), each with its **head**, the first
  due row in the plain claim order (priority, due time, primary key), found by one index
  dive per key (a correlated subquery ``ORDER BY … LIMIT 1``). A key whose READY rows are
  all in the future comes back without a head.
* :func:`first_rows` — the first ``n`` due rows of a few keys, one ``LIMIT n`` branch per key
  (``UNION ALL``): only keys that can take more than one row of the batch (few keys, or a
  weight above 1) need it.

The statements are compiled by the ORM (the QuerySet the claim narrowed: pauses, full keys,
the caller's filters), joined as derived tables and run through ``connection.cursor()``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from django.db import connections, models
from django.db.models.expressions import RawSQL

from ..backends import backend_for

#: ``(pk, key, priority)`` of a due row; rows of one key come in the plain claim order.
Row = tuple[Any, Any, int]
IN_KEY_ORDER = ("-queue_priority", "queue_run_at", "pk")


def _compiled(qs: models.QuerySet) -> tuple[str, tuple[Any, ...]]:
    sql, params = qs.query.sql_with_params()
    return sql, tuple(params)


def _head(qs: models.QuerySet, key: str, column: str) -> tuple[str, tuple[Any, ...]]:
    """The scalar subquery of one column of the walked key's head row."""
    of_walked = qs.filter(**{key: RawSQL("dbqueue_keys.dbqueue_key", ())})
    return _compiled(of_walked.order_by(*IN_KEY_ORDER).values(column)[:1])


class Walker:
    """One claim's walks over the keys of ``qs``: the head subqueries are compiled once."""

    def __init__(self, qs: models.QuerySet, key: str) -> None:
        self.qs, self.key = qs, key
        self.to_python = qs.model._meta.get_field(key).to_python

    @functools.cached_property
    def heads(self) -> tuple[str, tuple[Any, ...]]:
        """The walk's select list with each walked key's head (see ``fair_walk_sql``)."""
        ready = self.qs.ready()  # type: ignore[attr-defined]
        pk_sql, pk_params = _head(ready, self.key, "pk")
        priority_sql, priority_params = _head(ready, self.key, "queue_priority")
        columns = f"dbqueue_keys.dbqueue_key, dbqueue_keys.dbqueue_rows, ({pk_sql}), ({priority_sql})"
        return columns, (*pk_params, *priority_params)

    def walk(
        self, part: models.QuerySet, limit: int, budget: int | None
    ) -> tuple[list[tuple[Any, Row | None]], bool]:
        """Up to ``limit`` keys of ``part`` (``qs`` narrowed to a range of keys) with READY
        rows, in key order, each with its head row (None when none of its rows is due); and
        whether the walk stopped at its ``budget`` of index entries (see ``fair_keys_sql``)
        rather than at the last key."""
        using = self.qs.db
        sql, params = backend_for(using).fair_walk_sql(part, self.key, limit, budget, lambda: self.heads)
        with connections[using].cursor() as cursor:
            cursor.execute(sql, params)
            found = cursor.fetchall()
        walked: list[tuple[Any, Row | None]] = []
        read = 0
        for raw_key, rows, pk, priority in found:
            value = self.to_python(raw_key)
            walked.append((value, None if pk is None else (pk, value, priority)))
            read += rows or 0
        return walked, budget is not None and read >= budget


def first_rows(qs: models.QuerySet, key: str, wanted: dict[Any, int]) -> dict[Any, list[Row]]:
    """The first ``wanted[k]`` due rows of each key ``k`` (None: the rows without a key)."""
    ready = qs.ready()  # type: ignore[attr-defined]
    branches = [
        ready.filter(**({f"{key}__isnull": True} if value is None else {key: value}))
        .order_by(*IN_KEY_ORDER)
        .values_list("pk", key, "queue_priority", "queue_run_at")[:count]
        for value, count in wanted.items()
    ]
    if not branches:
        return {}
    union = branches[0] if len(branches) == 1 else branches[0].union(*branches[1:], all=True)
    return _by_key(union, wanted)


def _by_key(rows: Iterable[tuple[Any, ...]], wanted: dict[Any, int]) -> dict[Any, list[Row]]:
    found: dict[Any, list[tuple[Any, ...]]] = {value: [] for value in wanted}
    for row in rows:
        found[row[1]].append(row)
    # A UNION promises no order: each key's rows back in the plain claim order.
    return {
        value: [(pk, k, priority) for pk, k, priority, _ in sorted(got, key=lambda r: (-r[2], r[3], r[0]))]
        for value, got in found.items()
    }
