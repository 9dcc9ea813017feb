"""The two statements of every workflow run, built once per database: the read of the row's
checkpoints and the INSERT of a new one.

Through the ORM both went through the query compiler on every run: about 0.6 ms and 0.5 ms of
CPU on the benchmark's machine, most of what a 1-step workflow cost beyond an atomic job of
the same handler body (issue #36 asks for at most 1.3x). Their SQL depends only on the
table's columns and on the database, so it is built here once, as the engine builds its
fenced statements (queue/statements.py): identifiers from ``connection.ops.quote_name()`` and
the fields' ``column``, every value a parameter converted by its field
(``get_db_prep_save()``, as ``save()`` converts it). Both go through Django's cursor, so
execute wrappers, Sentry, debug-toolbar and ``assertNumQueries`` see them. The read's columns
come back through the converters the ORM applies (the backend's and the field's
``get_db_converters()``: the JSON result, aware datetimes, booleans), and its instances are
made by ``Model.from_db()``. (``QuerySet.raw()`` does the same, at twice the CPU: it works
the columns and their converters out again on every run.)
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any, cast

from django.db import connections, models

from ..tables.workflow import WorkflowStep


class StepStatements:
    """The checkpoint table's per-run statements on one database."""

    def __init__(self, using: str) -> None:
        connection = connections[using]
        quote = connection.ops.quote_name
        fields = list(WorkflowStep._meta.concrete_fields)
        self.using = using
        self._names = [field.attname for field in fields]
        self._converters = [_converters(field, connection) for field in fields]
        self._written = [field for field in fields if not field.primary_key]
        table = quote(WorkflowStep._meta.db_table)
        model, object_pk = (
            quote(cast(str, cast(models.Field, WorkflowStep._meta.get_field(name)).column))
            for name in ("model", "object_pk")
        )
        every = ", ".join(quote(cast(str, field.column)) for field in fields)
        self._load = f"SELECT {every} FROM {table} WHERE {model} = %s AND {object_pk} = %s"
        written = ", ".join(quote(cast(str, field.column)) for field in self._written)
        marks = ", ".join(["%s"] * len(self._written))
        self._insert = f"INSERT INTO {table} ({written}) VALUES ({marks})"

    def load(self, model: str, object_pk: str) -> dict[str, WorkflowStep]:
        """The checkpoints of the row ``model`` ``object_pk`` by name: one SELECT."""
        connection = connections[self.using]
        with connection.cursor() as cursor:
            cursor.execute(self._load, [model, object_pk])
            rows = cursor.fetchall()
        steps = {}
        for row in rows:
            values = [self._convert(value, at, connection) for at, value in enumerate(row)]
            step = WorkflowStep.from_db(self.using, self._names, values)
            steps[step.name] = step
        return steps

    def _convert(self, value: Any, at: int, connection: Any) -> Any:
        for convert, expression in self._converters[at]:
            value = convert(value, expression, connection)
        return value

    def insert(self, step: WorkflowStep) -> None:
        """INSERT ``step`` (a new checkpoint; its pk stays None: nothing reads it by pk)."""
        connection = connections[self.using]
        values = [field.get_db_prep_save(getattr(step, field.attname), connection) for field in self._written]
        with connection.cursor() as cursor:
            cursor.execute(self._insert, values)


Converter = tuple[Callable[[Any, Any, Any], Any], Any]


def _converters(field: models.Field, connection: Any) -> list[Converter]:
    """What the ORM applies to ``field``'s column as it comes back (the compiler's order: the
    backend's converters, then the field's), each with the column expression it is given."""
    column = field.get_col(WorkflowStep._meta.db_table)
    found = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
    return [(convert, column) for convert in found]


@cache
def step_statements(using: str) -> StepStatements:
    return StepStatements(using)
