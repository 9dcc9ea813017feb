"""How a DataFrame's columns map onto a queue model: field types, the unique key, and the
values the enqueue sets itself on every inserted row."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, cast

from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.db import models as db_models

from ..models import QUEUE_FIELDS, QueueMixin
from ..states import QueueState

#: Queue bookkeeping the enqueue sets itself; a DataFrame may carry any other column
#: (``queue_priority`` and ``queue_run_at`` per row, for instance).
QUEUE_BOOKKEEPING = frozenset(QUEUE_FIELDS) - {"queue_priority", "queue_run_at"}
_STRING_TYPES = ("CharField", "TextField", "SlugField", "EmailField", "URLField", "UUIDField", "JSONField")

#: One column every inserted row gets besides the DataFrame's: (column, SQL, params).
Fixed = tuple[str, str, list[Any]]


def spark_type(f: db_models.Field) -> str | None:
    """The Spark SQL type a DataFrame column is cast to before it is written to ``f``."""
    internal = f.get_internal_type()
    if isinstance(f, db_models.ForeignKey):
        return spark_type(f.target_field)
    if internal in ("AutoField", "IntegerField", "SmallIntegerField", "PositiveSmallIntegerField"):
        return "int"
    if internal in ("BigAutoField", "BigIntegerField", "PositiveIntegerField", "PositiveBigIntegerField"):
        return "bigint"
    if internal == "BooleanField":
        return "boolean"
    if internal == "FloatField":
        return "double"
    if internal == "DecimalField":
        decimal = cast(db_models.DecimalField, f)  # (or a subclass: the same internal type)
        return f"decimal({decimal.max_digits},{decimal.decimal_places})"
    if internal == "DateTimeField":
        return "timestamp"
    if internal == "DateField":
        return "date"
    if internal in _STRING_TYPES:
        return "string"
    return None  # left as it is: the driver and the server convert


def column_of(f: db_models.Field) -> str:
    """A concrete field's column (the stubs allow None: fields without a column of their own)."""
    return cast(str, f.column)


def _by_name(model: type[QueueMixin]) -> dict[str, db_models.Field]:
    fields = model._meta.concrete_fields
    return {f.name: f for f in fields} | {column_of(f): f for f in fields}


def unique_key_columns(model: type[QueueMixin], using: str) -> list[tuple[str, ...]]:
    """The column sets the database enforces as unique on the model's table (PK included)."""
    connection = connections[using]
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, model._meta.db_table)
    return [tuple(c["columns"]) for c in constraints.values() if c["unique"] or c["primary_key"]]


def key_fields(
    model: type[QueueMixin], key_columns: Sequence[str] | None, using: str
) -> list[db_models.Field]:
    """The fields that identify a row; refused unless the database enforces them as unique
    (without that, a re-run would enqueue every row again)."""
    opts = model._meta
    by_name = _by_name(model)
    unique_sets = unique_key_columns(model, using)
    if key_columns is None:
        candidates = [s for s in unique_sets if s != (opts.pk.column,)]
        if len(candidates) != 1:
            raise ImproperlyConfigured(
                f"{opts.label}: pass key_columns=[...] (the columns that identify a row); "
                f"unique column sets on {opts.db_table}: {candidates or 'none besides the primary key'}"
            )
        key_columns = list(candidates[0])
    if isinstance(key_columns, str):
        key_columns = [key_columns]
    fields = []
    for name in key_columns:
        if name not in by_name:
            raise ImproperlyConfigured(f"{opts.label} has no field or column {name!r} (key_columns)")
        fields.append(by_name[name])
    wanted = {column_of(f) for f in fields}
    if not any(set(cols) == wanted for cols in unique_sets):
        cols = ", ".join(sorted(wanted))
        raise ImproperlyConfigured(
            f"{opts.label}: enqueue_dataframe needs a UNIQUE constraint on exactly ({cols}) in "
            f"{opts.db_table} - without it a re-run would enqueue every row again. Add unique=True "
            f"or Meta.constraints = [UniqueConstraint(fields=[...])] and migrate."
        )
    return fields


def dataframe_fields(
    columns: Sequence[str],
    model: type[QueueMixin],
    priority: int | None,
    run_at: datetime | timedelta | None,
) -> list[db_models.Field]:
    """The model field of each DataFrame column, in order; refuses unknown, repeated and
    queue-bookkeeping columns, and per-row values that conflict with ``priority``/``run_at``."""
    opts = model._meta
    by_name = _by_name(model)
    fields: list[db_models.Field] = []
    for name in columns:
        f = by_name.get(name)
        if f is None:
            raise ImproperlyConfigured(f"DataFrame column {name!r} is not a field or column of {opts.label}")
        if f.generated:
            raise ImproperlyConfigured(
                f"DataFrame column {name!r}: {opts.label}.{f.name} is computed by the database "
                "(a generated column is never written)"
            )
        if f.name in QUEUE_BOOKKEEPING:
            raise ImproperlyConfigured(
                f"DataFrame column {name!r}: the queue sets {f.name} itself "
                "(queue_priority and queue_run_at may be given per row)"
            )
        if f in fields:
            raise ImproperlyConfigured(f"DataFrame names {opts.label}.{f.name} twice")
        fields.append(f)
    given = {f.name for f in fields}
    if priority is not None and "queue_priority" in given:
        raise ImproperlyConfigured("priority= conflicts with the DataFrame's queue_priority column")
    if run_at is not None and "queue_run_at" in given:
        raise ImproperlyConfigured("run_at= conflicts with the DataFrame's queue_run_at column")
    return fields


def fixed_values(
    model: type[QueueMixin],
    given: set[str],
    priority: int | None,
    run_at: datetime | timedelta | None,
    using: str,
) -> list[Fixed]:
    """What every inserted row gets besides the DataFrame's columns ``given`` (field names):
    READY and due by the database clock, and each other field's default."""
    opts = model._meta
    connection = connections[using]
    fixed: list[Fixed] = [
        ("queue_state", "%s", [QueueState.READY.value]),
        ("queue_attempts", "0", []),
        ("queue_last_error", "''", []),
        ("queue_enqueued_at", "UTC_TIMESTAMP(6)", []),
    ]
    if "queue_priority" not in given:
        value = priority if priority is not None else opts.get_field("queue_priority").get_default()
        fixed.append(("queue_priority", "%s", [value]))
    if "queue_run_at" not in given:
        if run_at is None:
            fixed.append(("queue_run_at", "UTC_TIMESTAMP(6)", []))
        elif isinstance(run_at, timedelta):
            micros = run_at // timedelta(microseconds=1)
            fixed.append(("queue_run_at", "UTC_TIMESTAMP(6) + INTERVAL %s MICROSECOND", [micros]))
        else:
            fixed.append(("queue_run_at", "%s", [connection.ops.adapt_datetimefield_value(run_at)]))
    lacking = []
    set_here = {column for column, _, _ in fixed}
    for f in opts.concrete_fields:
        if f.name in given or f.column in set_here or f.primary_key or f.generated:
            continue  # (a generated column, queue_has_error for one, is the database's to write)
        if f.has_default():
            # A callable default is called once per run, not once per row.
            fixed.append((column_of(f), "%s", [f.get_db_prep_save(f.get_default(), connection)]))
        elif not f.null and not f.has_db_default():
            lacking.append(f.name)
    if lacking:
        raise ImproperlyConfigured(
            f"{opts.label} fields {lacking} have no default and are not in the DataFrame"
        )
    return fixed
