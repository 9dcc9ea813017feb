"""The INSERT of new queue rows, from a statement built once per model and database.

Django compiles every INSERT anew (an ``InsertQuery``, its compiler, a placeholder and a
prepared parameter per column), and on MySQL/MariaDB the driver then escapes each parameter
into the text. For a new queue row that Python costs more than the round trip and the
commit. For the usual model (a table of its own, an auto primary key, plain columns) the
statement depends only on the model, the database and the columns, so an
:class:`InsertPlan` keeps it. Values are still prepared by each field's own
``get_db_prep_save()``, and the new primary key comes back the way Django's compiler gets it
(``lastrowid`` on MySQL/MariaDB and SQLite, ``RETURNING`` on PostgreSQL).

Values repeat: most columns of a new queue row hold the queue's defaults. A repeated value
of a field of Django's own (whose preparation depends on the value alone) is prepared once
and kept. On MySQL/MariaDB, mysqlclient interpolates parameters on the client anyway
(``literal()`` of each value, then ``%``): this module does the same with the driver's own
``literal()`` and keeps the literal of a repeated value too. A literal is kept only when it
is the same under every ``sql_mode`` and character set (numbers, NULL, strings the driver
did not have to escape), so a kept literal never depends on the connection that made it.

The queue's own nullable columns (the lease, the token, the finishing time…) are NULL in a
new row; a column left out of an INSERT is NULL too, so a statement names only the columns
that hold a value (:meth:`InsertPlan.shape`): the server then parses six values per queue row
instead of eleven, which measured ~25% more rows per second for multi-row INSERTs here.
Only those columns are left out: they have no database default (the plan takes no model with
``db_default``), whereas a domain table's column might have one that Django does not know.

Anything unusual (see :func:`insert_plan`) takes Django's path.
"""

from __future__ import annotations

import datetime
import decimal
import operator
from collections.abc import Callable, Sequence
from typing import Any

from django.conf import settings
from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper

from . import direct

#: Backends whose INSERT this module writes; others take Django's path.
VENDORS = frozenset({"mysql", "postgresql", "sqlite"})
#: Distinct values kept prepared per column (a queue column's default needs one).
KEPT_PER_FIELD = 32
#: Longest string kept prepared.
KEPT_MAX_LENGTH = 200


#: Types whose values are never expressions (insert_one() asks the rest).
PLAIN_VALUE_TYPES = frozenset(
    {type(None), str, int, bool, float, decimal.Decimal, datetime.datetime, datetime.date}
)

#: Matches no value by identity.
NOTHING = object()

#: pre_save() methods that return the row's value (or, with auto_now, the time): a mapping
#: row can stand in for an instance with them, and a new instance's value is its attribute.
PLAIN_PRE_SAVES = frozenset(
    {
        models.Field.pre_save,
        models.DateField.pre_save,
        models.DateTimeField.pre_save,
        models.TimeField.pre_save,
    }
)


class BinaryValue(Exception):
    """A value whose literal is bytes, not text: that statement goes with parameters."""


class Shape:
    """The columns one INSERT names: ``kept`` (indices into the plan's fields) and its SQL."""

    def __init__(self, plan: InsertPlan, kept: tuple[int, ...]) -> None:
        self.kept = kept
        self.all = len(kept) == len(plan.fields)
        columns = ", ".join(plan.quoted[index] for index in kept)
        self.head = f"{plan.statement} ({columns}) VALUES "
        self.marks = "(" + ", ".join(["%s"] * len(kept)) + ")"
        self.sql = self.head + self.marks + plan.returning
        self._pick = tuple_getter(kept)

    def pick(self, cells: Sequence[Any]) -> Sequence[Any]:
        """A row's cells of the columns this statement names."""
        return cells if self.all else self._pick(cells)


class InsertPlan:
    """The INSERT of one model's new rows on one database (see the module docstring)."""

    def __init__(
        self,
        model: type[models.Model],
        connection: BaseDatabaseWrapper,
        fields: list[Any],
        null_by_default: frozenset[str] = frozenset(),
    ) -> None:
        meta = model._meta
        qn = connection.ops.quote_name
        self.model = model
        self.fields = tuple(fields)
        self.attnames = frozenset(field.attname for field in fields)
        self.literal = connection.vendor == "mysql"  # the statement goes as text (see above)
        self.quoted = tuple(qn(field.column) for field in fields)
        self.statement = f"{connection.ops.insert_statement(on_conflict=None)} {qn(meta.db_table)}"
        # PostgreSQL has no lastrowid: the new key comes back by RETURNING, as Django's
        # compiler asks for it; MySQL/MariaDB and SQLite give it with the statement's result.
        self.returning = ""
        self.returning_params: Any = ()
        if connection.vendor == "postgresql":
            returning, self.returning_params = connection.ops.returning_columns([meta.pk])
            self.returning = " " + returning
        # Only Django's own fields prepare a value from the value alone; a custom field may
        # not (a random salt, a counter), so its values are prepared every time.
        self.keeps = tuple(type(field).__module__.startswith("django.db.models.fields") for field in fields)
        # Columns left out of a statement when the row's value is None (see the module
        # docstring); None is NULL for Django's own fields.
        self.nullable = tuple(
            index
            for index, field in enumerate(fields)
            if field.name in null_by_default and field.null and self.keeps[index]
        )
        self._shapes: dict[tuple[int, ...], Shape] = {}
        self.full = self.shape(())
        # A new row's nullable queue columns are all None most of the time: that statement
        # is known, and one itemgetter() call tells it is the one (see insert_one()).
        self.empty = self.shape(self.nullable)
        self.all_null = tuple(None for _ in self.nullable)
        # How insert_one() reads each value: where pre_save() returns the attribute and the
        # field is Django's own (so is its descriptor), the value in the instance's __dict__.
        self.reads = tuple(
            (
                field,
                field.attname,
                keeps and type(field).pre_save in PLAIN_PRE_SAVES and not own_pre_save(field),
            )
            for field, keeps in zip(fields, self.keeps, strict=True)
        )
        pk_col = meta.pk.get_col(meta.db_table)
        self.pk_attname = meta.pk.attname
        self.pk_column = meta.pk.column
        self.table = meta.db_table
        self.pk_converters: list[Callable[..., Any]] = [
            *connection.ops.get_db_converters(pk_col),
            *pk_col.get_db_converters(connection),
        ]
        self.pk_col = pk_col
        # An aware UTC time on a UTC connection has a literal of its own (see cell()).
        self.utc_text = self.literal and utc_connection(connection)
        self.utc_columns = frozenset(
            index
            for index, field in enumerate(fields)
            if self.utc_text and type(field) is models.DateTimeField
        )
        # Where every value is the instance's attribute, a new row with its nullable queue
        # columns NULL (the usual case) is read by two itemgetter() calls on its __dict__.
        self.all_plain = all(plain for _, _, plain in self.reads)
        attnames = [field.attname for field in fields]
        self.read_nullable = tuple_getter([attnames[index] for index in self.nullable])
        self.read_empty = tuple_getter([attnames[index] for index in self.empty.kept])
        self.kept: tuple[dict[tuple[type, Any], Any], ...] = tuple({} for _ in fields)
        self.last: list[tuple[Any, Any]] = [(NOTHING, None)] * len(fields)

    def shape(self, left_out: tuple[int, ...]) -> Shape:
        """The statement without the columns ``left_out`` (indices of ``nullable``)."""
        try:
            return self._shapes[left_out]
        except KeyError:
            kept = tuple(index for index in range(len(self.fields)) if index not in left_out)
            shape = self._shapes[left_out] = Shape(self, kept)
            return shape

    def cell(self, index: int, value: Any, connection: BaseDatabaseWrapper) -> Any:
        """``value`` of column ``index`` as it goes into the statement: the prepared
        parameter, or on MySQL/MariaDB its literal."""
        if type(value) is datetime.datetime and value.tzinfo is datetime.UTC and index in self.utc_columns:
            return utc_literal(value)
        key = kept_key(value) if self.keeps[index] else None
        if key is not None:
            try:
                return self.kept[index][key]
            except KeyError:
                pass
        prepared = self.fields[index].get_db_prep_save(value, connection)
        if not self.literal:
            cell = prepared
        else:
            cell = sql_literal(connection, prepared)
            if not portable_literal(prepared, cell):
                return cell
        if key is not None and len(self.kept[index]) < KEPT_PER_FIELD:
            self.kept[index][key] = cell
            # A new row's value is most often the very object of the field's default:
            # known by identity, it needs no key at all.
            self.last[index] = (value, cell)
        return cell

    def cells(
        self, values: Sequence[Any], connection: BaseDatabaseWrapper, columns: Sequence[int]
    ) -> list[Any] | None:
        """A row's cells (``values`` of the fields at ``columns``), or None on MySQL/MariaDB
        when a value's literal is bytes."""
        out = []
        append = out.append
        last = self.last
        utc_columns = self.utc_columns
        try:
            for index, value in zip(columns, values, strict=True):
                known, cell = last[index]
                if value is known:
                    append(cell)
                elif (
                    type(value) is datetime.datetime and value.tzinfo is datetime.UTC and index in utc_columns
                ):
                    append(utc_literal(value))  # cell()'s first case, without the call
                else:
                    append(self.cell(index, value, connection))
        except BinaryValue:
            return None
        return out

    def params(
        self, values: Sequence[Any], connection: BaseDatabaseWrapper, columns: Sequence[int]
    ) -> list[Any]:
        """A row's parameters, each prepared by its field (nothing kept)."""
        return [
            self.fields[index].get_db_prep_save(value, connection)
            for index, value in zip(columns, values, strict=True)
        ]

    def insert_one(self, obj: models.Model, connection: BaseDatabaseWrapper) -> bool:
        """INSERT ``obj`` as a new row and set its primary key. False (nothing sent) when a
        value is an expression: Django's path compiles those."""
        row = obj.__dict__
        if self.all_plain and self.read_nullable(row) == self.all_null:  # the usual new row
            shape = self.empty
            values: Sequence[Any] = self.read_empty(row)
            if not PLAIN_VALUE_TYPES.issuperset(map(type, values)) and any(
                hasattr(value, "resolve_expression") for value in values
            ):
                return False
        else:
            values = []
            for field, attname, plain in self.reads:
                # A plain pre_save() returns the attribute, which a new row holds in __dict__.
                value = row[attname] if plain else field.pre_save(obj, True)
                if type(value) not in PLAIN_VALUE_TYPES and hasattr(value, "resolve_expression"):
                    return False
                values.append(value)
            if not self.nullable:
                shape = self.full
            else:
                shape = self.shape(tuple(index for index in self.nullable if values[index] is None))
            values = shape.pick(values)
        # literal() needs the driver's connection: connect as Django's cursor() would.
        connection.close_if_health_check_failed()
        connection.ensure_connection()
        cells = self.cells(values, connection, shape.kept)
        if self.literal and cells is not None:
            # Every cell is the driver's literal() of a prepared value (see the module
            # docstring): mysqlclient would build the very same text from parameters.
            sql = shape.head + "(" + ", ".join(cells) + ")"
            if direct.unobserved(connection):
                pk = direct.execute(connection, sql, connected=True).insert_id()
            else:
                with connection.cursor() as cursor:
                    cursor.execute(sql)
                    pk = cursor.lastrowid
        else:
            params = cells if cells is not None else self.params(values, connection, shape.kept)
            with connection.cursor() as cursor:
                cursor.execute(shape.sql, params)
                if self.returning:
                    pk = connection.ops.fetch_returned_rows(cursor, self.returning_params)[0][0]
                else:
                    pk = connection.ops.last_insert_id(cursor, self.table, self.pk_column)
        for converter in self.pk_converters:
            pk = converter(pk, self.pk_col, connection)
        setattr(obj, self.pk_attname, pk)
        return True


def tuple_getter(keys: Sequence[Any]) -> Callable[[Any], tuple[Any, ...]]:
    """``operator.itemgetter(*keys)`` that always returns a tuple (also of one key or none)."""
    if len(keys) == 1:
        (key,) = keys
        return lambda values: (values[key],)
    if not keys:
        return lambda values: ()
    return operator.itemgetter(*keys)


_plans: dict[tuple[type[models.Model], str, str], InsertPlan | None] = {}


def insert_plan(model: type[models.Model], connection: BaseDatabaseWrapper) -> InsertPlan | None:
    """The plan for new rows of ``model`` without a primary key value, or None when Django's
    path must write them: another backend, a multi-table inheritance child, a primary key
    that is not an auto field or has a default, ``order_with_respect_to``, or a column that
    brings its own SQL (a placeholder, a database default, a generated or returned value)."""
    key = (model, connection.alias, connection.vendor)
    try:
        return _plans[key]
    except KeyError:
        pass
    meta = model._meta.concrete_model._meta
    pk = meta.pk
    fields = [f for f in meta.local_concrete_fields if f is not pk]
    plain = (
        connection.vendor in VENDORS
        and not meta.parents
        and pk is meta.auto_field
        and not pk.has_default()
        and not pk.has_db_default()
        and meta.order_with_respect_to is None
        and list(meta.db_returning_fields) == [pk]
        and bool(fields)
        and not any(
            f.generated or f.has_db_default() or f.db_returning or hasattr(f, "get_placeholder")
            for f in fields
        )
    )
    plan = InsertPlan(model, connection, fields, queue_null_columns(model)) if plain else None
    _plans[key] = plan
    return plan


def own_pre_save(field: Any) -> bool:
    """Django's date fields with ``auto_now``/``auto_now_add``: pre_save() sets the value,
    whatever the row says (as the ORM does)."""
    return isinstance(field, (models.DateField, models.TimeField)) and bool(
        getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False)
    )


def queue_null_columns(model: type[models.Model]) -> frozenset[str]:
    """The queue's own columns of ``model`` that a new row may leave out when NULL."""
    from .models import QUEUE_FIELDS, QueueMixin  # models imports this module

    return frozenset(QUEUE_FIELDS) if issubclass(model, QueueMixin) else frozenset()


def kept_key(value: Any) -> tuple[type, Any] | None:
    """The key a value is kept under, or None for values not worth keeping (or unhashable):
    NULL, numbers and short strings (the queue's defaults, a model's choices)."""
    if value is None or isinstance(value, int) or (isinstance(value, str) and len(value) <= KEPT_MAX_LENGTH):
        return (type(value), value)
    return None


def sql_literal(connection: BaseDatabaseWrapper, prepared: Any) -> str:
    """``prepared`` escaped by mysqlclient's own ``literal()``, as it interpolates a
    parameter. Raises BinaryValue for bytes (their literal is not text)."""
    if isinstance(prepared, (bytes, bytearray, memoryview)):
        raise BinaryValue
    raw = connection.connection
    return raw.literal(prepared).decode(raw.encoding)


def utc_literal(value: datetime.datetime) -> str:
    """What DateTimeField and MySQL's ``adapt_datetimefield_value()`` make of an aware UTC time
    on a connection in UTC, then ``literal()``: the naive time's ``str()``, quoted. That is
    the aware time's ``str()`` without its offset, which for ``datetime.UTC`` is "+00:00"."""
    return f"'{str(value)[:-6]}'"


def utc_connection(connection: BaseDatabaseWrapper) -> bool:
    """Whether aware times are written in UTC on ``connection`` (``utc_literal()`` applies)."""
    return settings.USE_TZ and connection.timezone_name == "UTC"


def datetime_literal(connection: BaseDatabaseWrapper, value: datetime.datetime | None) -> str:
    """The MySQL literal of a DateTimeField's ``value`` (``utc_literal()`` where it applies)."""
    if value is None:
        return "NULL"
    if value.tzinfo is datetime.UTC and utc_connection(connection):
        return utc_literal(value)
    return sql_literal(connection, connection.ops.adapt_datetimefield_value(value))


def portable_literal(prepared: Any, literal: str) -> bool:
    """A literal that no ``sql_mode`` or character set would write differently."""
    if prepared is None or isinstance(prepared, int):
        return True
    return isinstance(prepared, str) and literal == "'" + prepared + "'"
