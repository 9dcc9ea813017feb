"""The bounded fair claim's reads: the keys with work, and the first rows of chosen keys.

Two statements, read through the fair index (``(queue_state, key, -queue_priority,
queue_run_at, pk)``, asked for by check W051) and never more rows than they return, give or
take the keys' future rows:

* :meth:`Walker.walk` — each key's RUNNING rows (the running rows are few), and in the
  same statement the next keys with READY rows of one or more ranges of keys (the
  round robin's segments: after the key served last, then from the first), in key order
  (the backend's :meth:`~django_dbqueue.backends.base.QueueBackend.fair_walk_sql`: a loose
  index scan or a budgeted range on MySQL and MariaDB, a recursive skip scan on PostgreSQL),
  each with its **head**, the first due row in the plain claim order (priority, due time,
  primary key), found by one index dive per key (a correlated subquery ``ORDER BY … LIMIT
  1``). A key whose READY rows are all in the future comes back without a head.
* :func:`first_rows` — the first ``n`` due rows of a few keys, one ``LIMIT n`` branch per key
  (``UNION ALL``): only keys that can take more than one row of the batch (few keys, or a
  weight above 1) need it.

The statements are compiled by the ORM (the QuerySet the claim narrowed: pauses, full keys,
the caller's filters), joined as derived tables and run through ``connection.cursor()``. The
walk is compiled once per model, database, claim filters and shape of walk
(:class:`Statement`), with :class:`Marker` parameters where each claim's values go (the
turn, the last key walked, the limits): compiling them on every walk cost a fair claim
about 2.5 ms of Python each time (issue #37's profile).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import connections, models
from django.db.models import Count
from django.db.models.expressions import RawSQL

from ..backends import DbNow, backend_for, compiled
from ..backends.base import HeadsLockSql, WalkStep
from ..states import QueueState
from . import rotation

#: ``(pk, key, priority)`` of a due row; rows of one key come in the plain claim order.
Row = tuple[Any, Any, int]
IN_KEY_ORDER = ("-queue_priority", "queue_run_at", "pk")
#: A statement and its parameters.
SqlParams = tuple[str, tuple[Any, ...]]
#: Statements kept (a worker uses one or two shapes per model; the rest are other filters).
MAX_STATEMENTS = 256


class Marker:
    """A parameter of a cached statement, filled in for each run: ``name`` says with what."""

    __slots__ = ("name",)

    def __init__(self, name: Any) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Marker({self.name!r})"


@dataclass
class Statement:
    """A compiled statement whose parameters include :class:`Marker` objects."""

    sql: str
    params: tuple[Any, ...]

    def filled(self, values: dict[Any, Any]) -> list[Any]:
        return [values[p.name] if isinstance(p, Marker) else p for p in self.params]

    def fetch(self, using: str, values: dict[Any, Any]) -> list[tuple[Any, ...]]:
        """The rows of this statement run on database ``using`` with ``values`` filled in
        (through Django's cursor; the driver's types, no converters). Its text repeats from
        claim to claim: PostgreSQL runs it prepared (backends/prepared.py)."""
        return backend_for(using).fetch_repeated(self.sql, self.filled(values))


_statements: dict[tuple[Any, ...], Statement] = {}


#: Where :func:`filters_of` keeps its answer on the QuerySet it was asked about.
_FILTERS = "_dbqueue_statement_filters"
_UNKNOWN = object()


def filters_of(qs: models.QuerySet) -> tuple[Any, ...] | None:
    """What a statement built from ``qs`` depends on besides its model and database: the
    claim's own filters, compiled (one small compile per claim, against one per statement).
    None when their parameters cannot be a dictionary key: then nothing is cached.

    Kept on ``qs`` itself: a fair claim asks for its walks and for its rows' lock, and the
    QuerySet does not change meanwhile (``filter()`` and the like return new ones, without
    it); the second compile cost a claim of 100 rows about 0.3 ms."""
    known = qs.__dict__.get(_FILTERS, _UNKNOWN)
    if known is not _UNKNOWN:
        return known
    found: tuple[Any, ...] | None = (qs.model, qs.db, *compiled(qs.order_by().values("pk")))
    try:
        hash(found)
    except TypeError:
        found = None
    qs.__dict__[_FILTERS] = found
    return found


def cached(
    filters: tuple[Any, ...] | None, shape: tuple[Any, ...], build: Callable[[], SqlParams]
) -> Statement:
    """The statement of ``shape`` for these filters, built on first use."""
    if filters is None:
        return Statement(*build())
    found = _statements.get((*filters, *shape))
    if found is None:
        if len(_statements) >= MAX_STATEMENTS:
            _statements.clear()  # many filters come and go (pauses): start over, rarely
        found = _statements[(*filters, *shape)] = Statement(*build())
    return found


def _head(qs: models.QuerySet, key: str, column: str) -> SqlParams:
    """The scalar subquery of one column of the walked key's head row."""
    of_walked = qs.filter(**{key: RawSQL("dbqueue_keys.dbqueue_key", ())})
    return compiled(of_walked.order_by(*IN_KEY_ORDER).values(column)[:1])


def _running_sql(qs: models.QuerySet, key: str) -> SqlParams:
    held = qs.filter(queue_state=QueueState.RUNNING).order_by().values(key).annotate(n=Count("pk"))
    return compiled(held.values_list(key, "n"))


def _running_rows(qs: models.QuerySet, key: str) -> SqlParams:
    """The RUNNING counts as rows of the walk's five columns (part -1 first: see ``walk``)."""
    sql, params = _running_sql(qs, key)
    column = connections[qs.db].ops.quote_name(qs.model._meta.get_field(key).column)
    return f"SELECT -1, dbqueue_r.{column}, dbqueue_r.n, NULL, NULL FROM ({sql}) dbqueue_r", params


class _TurnInStatement:
    """A segment's bound when the walk's statement locks the turn itself
    (:func:`.rotation.locking_ctes`): the turn's key as that statement reads it."""

    def __repr__(self) -> str:
        return "TURN_IN_STATEMENT"


TURN_IN_STATEMENT: Any = _TurnInStatement()
#: The bound in SQL: NULL (so nothing walked) when the turn was not locked fresh.
_TURN_BOUND = "(SELECT dbqueue_bound FROM dbqueue_turn WHERE dbqueue_fresh)"


@dataclass
class Segment:
    """A range of keys the walk goes through in key order: those ``lookup`` (``gt``,
    ``lte``, or None: every key) the turn's key ``bound``; past ``after`` once walked."""

    lookup: str | None
    bound: Any = None
    after: Any = None
    done: bool = False


@dataclass
class HeadsLock:
    """A walk asked to lock, in its own statement, the heads of the first ``limit`` keys it
    finds with nothing running (PostgreSQL, :attr:`~django_dbqueue.backends.base.QueueBackend.locking_ctes`;
    only for a claim whose fair order those heads begin: no weights, see ``bounded``), and to
    move the turn past the last of them in the claim's order: the claim's rows then need no
    statement of their own when the walk found enough keys (the usual case with many keys).

    Filled by :meth:`Walker.walk`: ``locked``, the candidates it locked by primary key
    (``(pk, token, database now)``, as the claim's lock gives them); ``moved_to``, the key it
    moved the turn past (None: not moved; a head's key is never None)."""

    limit: int
    locked: dict[Any, tuple[Any, Any, Any]] = field(default_factory=dict)
    moved_to: Any = None


def _rows_of_heads(qs: models.QuerySet) -> SqlParams:
    """The heads' locking SELECT: due rows of ``qs`` whose primary key a walk's
    ``dbqueue_heads`` names, ``(pk, token, database now)``."""
    ready = qs.ready()  # type: ignore[attr-defined]
    named = RawSQL("ARRAY(SELECT dbqueue_pk FROM dbqueue_heads)", ())
    rows = backend_for(qs.db).with_array(ready, "pk", named).order_by()
    locking = rows.select_for_update(skip_locked=True).annotate(dbqueue_now=DbNow())
    return compiled(locking.values_list("pk", "queue_token", "dbqueue_now"))


class Walker:
    """One claim's walks over the keys of ``qs``."""

    def __init__(self, qs: models.QuerySet, key: str, filters: tuple[Any, ...] | None) -> None:
        self.qs, self.key, self.filters = qs, key, filters
        self.field = qs.model._meta.get_field(key)
        self.to_python = self.field.to_python

    def _heads(self) -> SqlParams:
        """The walk's select list with each walked key's head (see ``fair_walk_sql``)."""
        ready = self.qs.ready()  # type: ignore[attr-defined]
        pk_sql, pk_params = _head(ready, self.key, "pk")
        priority_sql, priority_params = _head(ready, self.key, "queue_priority")
        columns = f"dbqueue_keys.dbqueue_key, dbqueue_keys.dbqueue_rows, ({pk_sql}), ({priority_sql})"
        return columns, (*pk_params, *priority_params)

    def _marker(self, name: Any) -> RawSQL:
        return RawSQL("%s", (Marker(name),), output_field=self.field)

    def _bound(self, segment: Segment, number: int) -> RawSQL:
        if segment.bound is TURN_IN_STATEMENT:
            return RawSQL(_TURN_BOUND, (), output_field=self.field)
        return self._marker(("bound", number))

    def _heads_lock(self) -> HeadsLockSql:
        rows = _rows_of_heads(self.qs)
        model, using = self.qs.model, self.qs.db
        move = rotation.move_to_last_locked(model, using, self.key)
        return HeadsLockSql(_running_sql(self.qs, self.key), rows, move, Marker("heads"))

    def _build(
        self,
        segments: list[Segment],
        loose: bool,
        with_running: bool,
        turn: SqlParams | None,
        lock: bool = False,
    ) -> SqlParams:
        parts, steps = [], []
        for number, segment in enumerate(segments):
            part = self.qs
            if segment.lookup is not None:
                part = part.filter(**{f"{self.key}__{segment.lookup}": self._bound(segment, number)})
            if segment.after is not None:
                part = part.filter(**{f"{self.key}__gt": self._marker(("after", number))})
            parts.append(part)
            steps.append(WalkStep(self.qs, self._upper(segment, number)))
        budget = None if loose else Marker("budget")
        extra = _running_rows(self.qs, self.key) if with_running and not lock else None
        heads_lock = self._heads_lock() if lock else None
        return backend_for(self.qs.db).fair_walk_sql(
            parts, self.key, Marker("limit"), budget, self._heads, extra, turn, heads_lock, steps
        )

    def _upper(self, segment: Segment, number: int) -> SqlParams | None:
        """The segment's inclusive upper bound as SQL (a recursive walk's stop: ``WalkStep``);
        its lower bounds (``gt`` the turn, past ``after``) need none, a walk's steps go past
        its first key."""
        if segment.lookup != "lte":
            return None
        if segment.bound is TURN_IN_STATEMENT:
            return _TURN_BOUND, ()
        return "%s", (Marker(("bound", number)),)

    def walk(
        self,
        segments: list[Segment],
        limit: int,
        budget: int | None,
        with_running: bool = False,
        turn: SqlParams | None = None,
        lock: HeadsLock | None = None,
    ) -> tuple[list[tuple[list[tuple[Any, Row | None]], bool]], dict[Any, int], tuple[Any, bool] | None]:
        """For each of ``segments`` (one statement for them all): up to ``limit`` keys with
        READY rows, in key order, each with its head row (None when none of its rows is
        due); and whether the walk stopped at its ``budget`` of index entries (see
        ``fair_keys_sql``) rather than at the last key. With ``with_running``, the same
        statement counts each key's RUNNING rows too (returned second; else empty). With
        ``turn`` (:func:`.rotation.locking_ctes`; the segments' bound
        :data:`TURN_IN_STATEMENT`), the same statement locks the turn: returned third, its
        key and whether it was locked as the walk saw it (None: not locked). With ``lock``
        (and ``turn`` and ``with_running``), it locks heads too and fills ``lock`` in."""
        shape = (
            "walk",
            self.key,
            budget is None,
            with_running,
            turn is not None,
            lock is not None,
            *((s.lookup, s.after is None) for s in segments),
        )
        statement = cached(
            self.filters,
            shape,
            lambda: self._build(segments, budget is None, with_running, turn, lock is not None),
        )
        connection = connections[self.qs.db]
        values: dict[Any, Any] = {"limit": limit, "budget": budget, "heads": lock.limit if lock else None}
        for number, segment in enumerate(segments):
            if segment.bound is not TURN_IN_STATEMENT:
                values["bound", number] = self.field.get_db_prep_value(segment.bound, connection)
            values["after", number] = self.field.get_db_prep_value(segment.after, connection)
        found = statement.fetch(self.qs.db, values)
        walked: list[list[tuple[Any, Row | None]]] = [[] for _ in segments]
        read = [0] * len(segments)
        held: dict[Any, int] = {}
        taken: tuple[Any, bool] | None = None
        for number, raw_key, rows, pk, priority, *now in found:
            value = None if raw_key is None else self.to_python(raw_key)
            if number == -4:
                assert lock is not None
                lock.moved_to = value
            elif number == -3:
                assert lock is not None
                lock.locked[pk] = (pk, rows, now[0])
            elif number == -2:
                taken = (value, bool(rows))
            elif number == -1:
                held[value] = int(rows)
            else:
                walked[number].append((value, None if pk is None else (pk, value, priority)))
                read[number] += rows or 0
        ran_out = [budget is not None and count >= budget for count in read]
        return list(zip(walked, ran_out, strict=True)), held, taken


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
