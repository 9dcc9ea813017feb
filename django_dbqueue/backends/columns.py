"""A model field's column as a connection quotes it: the identifiers of the statements the
engine and its wings build once per model and database (``queue/statements.py``, the attempt
history's copy, the workflows' checkpoints and events, the fair claim's turn) and then send
with parameters only. Public API: ``connection.ops.quote_name()`` and the field's ``column``.

And what the ORM's compiler applies to a column's values as they come back
(``get_db_converters()``), for the statements that read rows through ``connection.cursor()``
and make instances with ``Model.from_db()`` (the claim's loader, the workflows' checkpoints and
events): an instance then holds what a QuerySet would have given it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from django.db import models


def quoted_column(connection: Any, model: type[models.Model], name: str) -> str:
    """The column of ``model``'s field ``name``, quoted for ``connection``."""
    return connection.ops.quote_name(cast(str, cast(models.Field, model._meta.get_field(name)).column))


#: A converter and the column expression it is given.
Converter = tuple[Callable[[Any, Any, Any], Any], Any]


def column_converters(field: models.Field, connection: Any) -> list[Converter]:
    """What the ORM applies to ``field``'s column as it comes back (the compiler's order: the
    backend's converters, then the field's), each with the column expression it is given."""
    column = field.get_col(field.model._meta.db_table)
    found = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
    return [(convert, column) for convert in found]


def converted(value: Any, converters: list[Converter], connection: Any) -> Any:
    """``value`` as read from the database, through its column's ``converters``."""
    for convert, expression in converters:
        value = convert(value, expression, connection)
    return value


__all__ = ["Converter", "column_converters", "converted", "quoted_column"]
