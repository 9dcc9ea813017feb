"""A model field's column as a connection quotes it: the identifiers of the statements the
engine and its wings build once per model and database (``queue/statements.py``, the attempt
history's copy, the workflows' checkpoints and events, the fair claim's turn) and then send
with parameters only. Public API: ``connection.ops.quote_name()`` and the field's ``column``."""

from __future__ import annotations

from typing import Any, cast

from django.db import models


def quoted_column(connection: Any, model: type[models.Model], name: str) -> str:
    """The column of ``model``'s field ``name``, quoted for ``connection``."""
    return connection.ops.quote_name(cast(str, cast(models.Field, model._meta.get_field(name)).column))


__all__ = ["quoted_column"]
