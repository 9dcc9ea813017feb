"""``bulk_enqueue()`` of mappings: rows as parameter lists into one multi-row INSERT per batch.

Through ``bulk_create`` every row became a model instance (``Model.__init__``), every value
went through ``get_db_prep_save`` and the compiler rebuilt the statement for every batch
(issue #33: a fifth of a raw multi-row INSERT's rate). Here, per model, database and set of
keys the caller gives, the plan is made once:

* the statement: ``INSERT INTO t (c1, …) VALUES (…), (…)`` from ``connection.ops.quote_name``
  and ``connection.ops.bulk_insert_sql`` (what the ORM's own insert compiler uses), one per
  batch size, and sent with named parameters through ``connection.cursor().execute()``, so
  execute wrappers, Sentry, debug-toolbar and ``assertNumQueries`` see it like any other;
  a value every row of the call shares (the READY state, a default, the open batch) is one
  parameter of the statement, not one per row, so the driver quotes it once per batch;
* each column's value where a row does not give it: its default adapted once
  (``get_db_prep_save``), a callable default called per row as ``Model.__init__`` would, and a
  queue time the database's clock, ``COALESCE(%s, <the clock>)`` in the statement (DESIGN.md,
  "One clock"), compiled once from ``DbNow`` by the ORM's compiler;
* each value a row gives: adapted by its field's ``get_db_prep_save`` (the ORM's own
  conversion: a JSON payload is dumped by its JSONField, an aware datetime made the database's),
  except a ``str`` for Django's own text fields, which that conversion returns unchanged, and
  a ``dict``/``list`` of Django's own JSONField where it is ``json.dumps`` (the same text);
* a column no row gives is left out of the statement when the database stores the same value
  itself: NULL for a nullable column without a default, the ``db_default`` where it equals the
  field's default (``queue_dependants``). What is left per row is what the driver quotes, one
  parameter at a time (on MariaDB the largest client cost of a batch): the values the rows
  give and the callable defaults.

``auto_now``/``auto_now_add`` date fields take one ``pre_save()`` value per batch. A model
whose field computes its value in its own ``pre_save()`` (a FileField, a user's field type)
cannot be served without an instance: :func:`plan_for` says so (None) and the caller builds
instances, as it does when asked to (``bulk_enqueue(..., build_instances=True)``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from types import SimpleNamespace
from typing import Any, cast

from django.db import connections, models, transaction
from django.db.backends.base.operations import BaseDatabaseOperations
from django.db.models.fields import NOT_PROVIDED
from django.db.models.sql import Query

from ..backends import DbNow, backend_for
from ..priorities import check_priority

_DATE_FIELDS = (models.DateField, models.TimeField)  # DateTimeField is a DateField


class InputError(ValueError, TypeError):
    """A row's value that its field cannot store: the row and the field are named, and
    nothing was written. Both a ``ValueError`` and a ``TypeError``: what the field raised
    (``int("many")``, ``json.dumps(object())``) is caught as it would be from ``save()``."""


@dataclass
class _Column:
    """One column of the INSERT: how a row's value becomes its parameter."""

    field: models.Field[Any, Any]
    #: The parameter of a row that does not give the column (already adapted).
    constant: Any = None
    #: Called per row that does not give the column (a callable default, e.g. ``uuid4``).
    per_row: Callable[[], Any] | None = None
    #: Called once per batch (an ``auto_now``/``auto_now_add`` field's ``pre_save()``).
    per_batch: Callable[[], Any] | None = None
    #: The database's clock as SQL, for a queue time a row does not give.
    clock: str | None = None
    #: Whether the column's own database default (``db_default``) is ``constant``.
    database_fills: bool = False

    def omissible(self) -> bool:
        """Whether a row that does not give the column may leave it out of the INSERT: its
        value is NULL, which is what the column gets (Django declares no column default), or
        the column's ``db_default``, which is the value the row would have sent. Each value
        left out is one parameter less per row for the driver to quote (on MariaDB about a
        tenth of a 1,000-row batch's CPU per column), and Django's own INSERT leaves out a
        column that only takes its ``db_default`` the same way."""
        if self.database_fills:
            return self.per_row is None and self.per_batch is None and self.clock is None
        return (
            self.constant is None
            and self.per_row is None
            and self.per_batch is None
            and self.clock is None
            and self.field.null
            and self.field.db_default is NOT_PROVIDED
        )


@dataclass
class _Layout:
    """The columns of one call's INSERT: those some row gives, or that take a value."""

    #: Per column of the INSERT: its position in the plan and its placeholder (SQL whose
    #: first ``%s``, if any, is the column's parameter).
    columns: list[tuple[int, str]]
    #: Plan position -> index in a row's parameters (the columns whose value may differ
    #: from row to row: some row gives it, or it takes a callable default).
    index: dict[int, int]
    #: A row's parameters before its own values.
    base: list[Any]
    #: Plan position -> the parameter every row of the call shares (already adapted): sent
    #: once per statement, not once per row (:meth:`InsertPlan.sql`).
    shared: dict[int, Any] = field(default_factory=dict)


@dataclass
class _Shape:
    """What the rows with one set of keys give, and which defaults they take per row."""

    #: (parameter index, key, the field's ``get_db_prep_save`` or :func:`_adapter`'s
    #: shortcut of it) per given column.
    given: list[tuple[int, str, Callable[[Any, Any], Any]]]
    #: (parameter index, plan position, the field's callable default) per column the rows
    #: take it for.
    per_row: list[tuple[int, int, Callable[[], Any]]]


@dataclass
class InsertPlan:
    """One model's multi-row INSERT on one database, built once (:func:`plan_for`)."""

    model: type[models.Model]
    using: str
    columns: list[_Column]
    #: Field names and attnames a mapping may use, to their column's position.
    positions: dict[str, int]
    _sql: dict[tuple[tuple[tuple[int, str], ...], frozenset[int], int], tuple[str, list[str]]] = field(
        default_factory=dict
    )

    def accepts(self, keys: Sequence[str]) -> bool:
        """Whether a mapping with these keys can go without an instance (all are columns)."""
        return all(key in self.positions for key in keys)

    def rows(
        self,
        mappings: Sequence[Mapping[str, Any]],
        fixed: Mapping[str, Any],
        defaults: Mapping[str, Any],
    ) -> tuple[_Layout, list[list[Any]]]:
        """The INSERT's columns and each mapping's parameters, or :class:`InputError` naming the
        first bad value (before any statement is sent). ``fixed``: values every row gets
        whatever it gives (the queue state, the open batch); ``defaults``: values of the rows
        that do not give one (a trace context)."""
        connection = connections[self.using]
        # An auto_now field's pre_save() value, once for the batch (and, like Django, over
        # a value the row gives).
        fixed = {
            **{c.field.name: c.per_batch() for c in self.columns if c.per_batch is not None},
            **fixed,
        }
        shapes = {tuple(mapping) for mapping in mappings}
        layout = self._layout(shapes, fixed, defaults, connection)
        overridden = {self.positions[name] for name in fixed}
        preset = overridden | {self.positions[name] for name in defaults}
        known = {keys: self._shape(keys, layout, overridden, preset) for keys in shapes}
        out: list[list[Any]] = []
        for number, mapping in enumerate(mappings):
            shape = known[tuple(mapping)]
            params = layout.base.copy()
            for index, position, default in shape.per_row:
                params[index] = self._adapt(number, position, default(), connection)
            for index, key, prep in shape.given:
                try:
                    params[index] = prep(mapping[key], connection)
                except Exception as exc:
                    raise InputError(self._describe(number, self.positions[key], exc)) from exc
            out.append(params)
        return layout, out

    def insert(self, layout: _Layout, rows: list[list[Any]], batch_size: int) -> int:
        """Send ``rows`` (from :meth:`rows`), ``batch_size`` per statement; return how many."""
        connection = connections[self.using]
        fields = [self.columns[position].field for position, _ in layout.columns]
        most = connection.ops.bulk_batch_size(fields, [None] * batch_size) if fields else batch_size
        size = max(1, min(batch_size, most or batch_size))
        shared = {_shared_name(position): value for position, value in layout.shared.items()}
        with connection.cursor() as cursor:
            for start in range(0, len(rows), size):
                batch = rows[start : start + size]
                sql, names = self.sql(layout, len(batch))
                params: Any = [value for row in batch for value in row]
                if shared:
                    params = dict(zip(names, params, strict=True))
                    params.update(shared)
                try:
                    cursor.execute(sql, params)
                except (TypeError, ValueError) as exc:
                    # A value the driver adapts itself and could not (psycopg dumps JSON when
                    # it sends it); the caller's atomic block writes nothing of the call.
                    last = start + len(batch) - 1
                    raise InputError(
                        f"bulk_enqueue() rows {start}-{last}: {type(exc).__name__}: {exc}"
                    ) from exc
        return len(rows)

    def sql(self, layout: _Layout, count: int) -> tuple[str, list[str]]:
        """The INSERT of ``count`` rows of ``layout`` and the names of its per-row parameters
        in the order of the rows' values (built once per layout and batch size).

        With values every row shares (``layout.shared``: where the backend
        ``shares_named_parameters``), parameters are named (``%(name)s``, which Django's
        cursor passes on): a shared value is one name used in every row, so the driver
        quotes it once per statement, not once per row (on MariaDB the client's largest cost
        per row was quoting the constants: the state, the priority, the attempts). Without,
        the placeholders stay positional (``%s``) and the names are not used."""
        key = (tuple(layout.columns), frozenset(layout.shared), count)
        found = self._sql.get(key)
        if found is None:
            connection = connections[self.using]
            quote = connection.ops.quote_name
            fields = [self.columns[position].field for position, _ in layout.columns]
            names = ", ".join(quote(cast(str, f.column)) for f in fields)
            placeholders: Any = []  # per row, one placeholder per column
            per_row: list[str] = []
            for _ in range(count):
                row = []
                for position, placeholder in layout.columns:
                    if position in layout.shared:
                        name = _shared_name(position)
                    elif layout.shared and position in layout.index:
                        name = f"v{len(per_row)}"
                        per_row.append(name)
                    else:  # the clock's SQL, or a positional parameter
                        row.append(placeholder)
                        continue
                    row.append(placeholder.replace("%s", f"%({name})s", 1))
                placeholders.append(row)
            values = connection.ops.bulk_insert_sql(fields, placeholders)
            found = (f"INSERT INTO {quote(self.model._meta.db_table)} ({names}) {values}", per_row)
            self._sql[key] = found
        return found

    # -- building the parameters ---------------------------------------------------------

    def _layout(
        self,
        shapes: set[tuple[str, ...]],
        fixed: Mapping[str, Any],
        defaults: Mapping[str, Any],
        connection: Any,
    ) -> _Layout:
        overridden = {self.positions[name] for name in fixed}
        # The columns whose value may differ from row to row: one a row gives (over no fixed
        # value), or a callable default's; every other column with a parameter is shared.
        varying = {self.positions[key] for keys in shapes for key in keys} - overridden
        varying |= {p for p, c in enumerate(self.columns) if c.per_row is not None and p not in overridden}
        values = {self.positions[name]: value for name, value in {**defaults, **fixed}.items()}
        shares = backend_for(self.using).shares_named_parameters
        layout = _Layout(columns=[], index={}, base=[])
        for position, column in enumerate(self.columns):
            if position in values or position in varying:
                placeholder = f"COALESCE(%s, {column.clock})" if column.clock else "%s"
            elif column.clock:
                layout.columns.append((position, column.clock))  # every row: the database's clock
                continue
            elif column.omissible():
                continue
            else:
                placeholder = "%s"
            layout.columns.append((position, placeholder))
            value = self._adapt(None, position, values[position], connection) if position in values else None
            if position in varying or not shares:
                layout.index[position] = len(layout.base)
                layout.base.append(value if position in values else column.constant)
            else:
                layout.shared[position] = value if position in values else column.constant
        return layout

    def _shape(
        self, keys: tuple[str, ...], layout: _Layout, overridden: set[int], preset: set[int]
    ) -> _Shape:
        """How rows giving ``keys`` fill their parameters: a value given over a fixed one is
        ignored (``overridden``); a column with a preset value takes no default per row."""
        connection = connections[self.using]
        taken = {self.positions[key] for key in keys}
        if len(taken) != len(keys):  # a field given twice (by name and by attname)
            raise TypeError(f"{self.model.__name__}: a field is given twice among {sorted(keys)}")
        given = [(self.positions[key], key) for key in keys if self.positions[key] not in overridden]
        return _Shape(
            given=[
                (layout.index[position], key, _adapter(self.columns[position].field, connection))
                for position, key in given
            ],
            per_row=[
                (layout.index[position], position, column.per_row)
                for position, column in enumerate(self.columns)
                if column.per_row is not None and position not in taken and position not in preset
            ],
        )

    def _adapt(self, number: int | None, position: int, value: Any, connection: Any) -> Any:
        try:
            return self.columns[position].field.get_db_prep_save(value, connection)
        except Exception as exc:
            raise InputError(self._describe(number, position, exc)) from exc

    def _describe(self, number: int | None, position: int, exc: Exception) -> str:
        where = f"row {number}" if number is not None else "every row"
        name = self.columns[position].field.name
        return f"bulk_enqueue() {where}, field {name!r}: {type(exc).__name__}: {exc}"


#: Text fields whose ``get_db_prep_save()`` gives a ``str`` back unchanged: Django's own
#: ``CharField`` and ``TextField`` (and subclasses that keep their conversion, e.g. EmailField).
_TEXT_CONVERSIONS = {
    (models.CharField.get_prep_value, models.CharField.to_python),
    (models.TextField.get_prep_value, models.TextField.to_python),
}


def _adapter(model_field: models.Field[Any, Any], connection: Any) -> Callable[[Any, Any], Any]:
    """How a row's value of ``model_field`` becomes its parameter: ``get_db_prep_save``, or,
    where that chain of calls is known to give what a shorter path gives, the shorter path
    (decided once per column): a ``str`` for a text field passed as it is (a kind, a queue
    name, an email per row), a JSON document encoded directly (:func:`_json_adapter`)."""
    prep = model_field.get_db_prep_save
    kind = type(model_field)
    if isinstance(model_field, models.JSONField):
        return _json_adapter(model_field, connection) or prep
    if (
        kind.get_db_prep_save is not models.Field.get_db_prep_save
        or kind.get_db_prep_value is not models.Field.get_db_prep_value
        or (kind.get_prep_value, kind.to_python) not in _TEXT_CONVERSIONS
    ):
        return prep

    def text(value: Any, connection: Any) -> Any:
        return value if type(value) is str else prep(value, connection)

    return text


#: What ``json.dumps(value)`` calls (its default encoder, which Django's JSONField uses
#: without an ``encoder``): the same text, without ``dumps``'s checks of its keywords.
_ENCODE_JSON = json.JSONEncoder().encode


def _json_adapter(
    model_field: models.JSONField[Any, Any], connection: Any
) -> Callable[[Any, Any], Any] | None:
    """A ``dict`` or ``list`` of Django's own ``JSONField`` without an encoder, on a database
    whose operations keep the base ``adapt_json_value`` (``json.dumps(value, cls=None)``;
    MariaDB, MySQL, SQLite): the default encoder's text, the bytes that chain stores, without
    its five calls per row. Elsewhere (PostgreSQL wraps the value for psycopg to dump), a
    field subclass or an encoder: None, and the field's own ``get_db_prep_save``."""
    kind = type(model_field)
    if (
        model_field.encoder is not None
        or type(connection.ops).adapt_json_value is not BaseDatabaseOperations.adapt_json_value
        or kind.get_db_prep_save is not models.JSONField.get_db_prep_save
        or kind.get_db_prep_value is not models.JSONField.get_db_prep_value
        or kind.get_prep_value is not models.Field.get_prep_value
    ):
        return None
    prep = model_field.get_db_prep_save

    def document(value: Any, connection: Any) -> Any:
        kind = type(value)
        return _ENCODE_JSON(value) if kind is dict or kind is list else prep(value, connection)

    return document


def _shared_name(position: int) -> str:
    """The parameter name of the column at ``position`` when all rows share its value."""
    return f"c{position}"


def _clock_sql(using: str) -> str:
    """The database's clock as SQL, compiled by the ORM's compiler from ``DbNow``."""
    connection = connections[using]
    compiler = Query(None).get_compiler(connection=connection)
    sql, params = compiler.compile(DbNow())
    if params:  # no backend needs any; a statement built once could not carry them
        raise NotImplementedError("the database clock's SQL takes parameters")
    return sql


def _column(model_field: models.Field[Any, Any], using: str, clock: str) -> _Column | None:
    """How the INSERT fills ``model_field``; None if only an instance can (its ``pre_save``)."""
    connection = connections[using]
    column = _Column(model_field)
    if hasattr(model_field, "get_placeholder"):
        return None  # a placeholder per value (e.g. a geometry's): the compiler's business
    if isinstance(model_field, _DATE_FIELDS) and (model_field.auto_now or model_field.auto_now_add):
        column.per_batch = lambda: model_field.pre_save(SimpleNamespace(), True)  # type: ignore[arg-type]
        return column
    if type(model_field).pre_save is not models.Field.pre_save and not isinstance(model_field, _DATE_FIELDS):
        return None
    if model_field.has_default():
        default = model_field.get_default()
        if callable(model_field.default) and not hasattr(default, "resolve_expression"):
            column.per_row = model_field.get_default
            return column
    elif model_field.db_default is not NOT_PROVIDED:
        default = model_field.db_default
        if isinstance(default, models.Value):
            default = default.value
    else:
        default = model_field.get_default()
    if isinstance(default, DbNow):
        # A queue time: the database's clock unless the row gives one.
        column.clock = clock
        return column
    if hasattr(default, "resolve_expression"):
        return None  # another expression default: the compiler's business
    column.constant = model_field.get_db_prep_save(default, connection)
    column.database_fills = _database_fills(model_field, column.constant, connection)
    return column


def _database_fills(model_field: models.Field[Any, Any], constant: Any, connection: Any) -> bool:
    """Whether the column's ``db_default`` stores ``constant`` (e.g. ``queue_dependants``:
    False both ways), so that a row may leave it to the database."""
    db_default = model_field.db_default
    if isinstance(db_default, models.Value):  # Django 5.2 wraps a plain value in one
        db_default = db_default.value
    elif db_default is NOT_PROVIDED or hasattr(db_default, "resolve_expression"):
        return False  # none, or an expression: only the value the row sends is known
    stored = model_field.get_db_prep_save(db_default, connection)
    return type(stored) is type(constant) and stored == constant


@cache
def _plan(model: type[models.Model], using: str) -> InsertPlan | None:
    opts = model._meta
    if opts.parents or opts.proxy:
        return None  # bulk_create refuses multi-table inheritance; a proxy's concrete model will do
    clock = _clock_sql(using)
    columns: list[_Column] = []
    for model_field in opts.concrete_fields:
        if model_field.generated or (model_field.primary_key and isinstance(model_field, models.AutoField)):
            continue
        column = _column(model_field, using, clock)
        if column is None:
            return None
        columns.append(column)
    positions: dict[str, int] = {}
    for position, column in enumerate(columns):
        positions[column.field.attname] = position
        if not column.field.is_relation:
            positions[column.field.name] = position
    return InsertPlan(model=model, using=using, columns=columns, positions=positions)


def plan_for(model: type[models.Model], using: str) -> InsertPlan | None:
    """The model's INSERT plan on ``using`` (built once), or None when a field needs an
    instance (its own ``pre_save()``, a per-value placeholder or expression default)."""
    return _plan(model, using)


def insertable(plan: InsertPlan | None, rows: Sequence[Any]) -> bool:
    """Whether ``rows`` can go by ``plan``: all mappings whose keys are the model's columns
    (anything else, an instance or a relation given by name, is built as an instance)."""
    if plan is None:
        return False
    accepted: set[tuple[str, ...]] = set()  # each set of keys checked once, not once per row
    for row in rows:
        if type(row) is not dict and not isinstance(row, Mapping):  # the ABC check is slow
            return False
        keys = tuple(row)
        if keys not in accepted:
            if not plan.accepts(keys):
                return False
            accepted.add(keys)
    return True


def enqueue_mappings(
    plan: InsertPlan,
    rows: Sequence[Mapping[str, Any]],
    batch_size: int,
    fixed: Mapping[str, Any],
    defaults: Mapping[str, Any],
) -> int:
    """Insert ``rows`` by ``plan``, every value checked and adapted before the first
    statement (a bad one raises, and nothing is written); return how many were inserted."""
    for number, row in enumerate(rows):
        priority = row.get("queue_priority")  # checked like an instance's (check_row_priority)
        if isinstance(priority, int) and not isinstance(priority, bool):
            try:
                check_priority(priority, plan.model)
            except ValueError as exc:
                raise ValueError(f"bulk_enqueue() row {number}: {exc}") from None
    layout, params = plan.rows(rows, fixed, defaults)
    with transaction.atomic(using=plan.using, savepoint=False):
        return plan.insert(layout, params, batch_size)
