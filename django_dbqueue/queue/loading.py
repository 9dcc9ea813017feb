"""Loading a claim's rows: one SELECT built once per model and database, its columns run
through the ORM's own converters, and the instances made by ``Model.from_db()``.

Through a QuerySet (``filter(queue_token=…, pk__in=ids)``) every claim compiled the SELECT
again, passed each of its hundreds of keys through the lookup machinery, and worked out the
columns and their converters anew; in a lease-mode drain that was the largest part of a
claim's Python (issue #33). Its SQL depends only on the model's table and columns and on the
database, so it is built here once, as the engine's fenced statements are
(queue/statements.py): identifiers from ``connection.ops.quote_name()`` and the fields'
``column``, every value a parameter. The statement goes through Django's cursor, so execute
wrappers, Sentry, debug-toolbar and ``assertNumQueries`` see it as they saw the QuerySet's.

The converters are the ones the ORM's compiler applies (the backend's ``get_db_converters()``
then the column's, only for the columns that have some), so an instance holds what the
QuerySet gave it. A model whose rows a QuerySet reads from more than its own table
(multi-table inheritance) or through a base manager of its own keeps the QuerySet.

The times the claim's UPDATE has just written (``Claim.times()``: the claim's database time,
and that plus the lease) are not read back: the instances get the values the UPDATE wrote,
which spares two date-times parsed and converted per row (about 3 µs of a lease-mode job's
CPU, issue #33).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from operator import itemgetter
from typing import TYPE_CHECKING, Any, cast

from django.db import connections, models

from ..backends import Converter, column_converters, converted
from .lease import CLAIM_TIMES, Claim
from .statements import KEYS, statements

if TYPE_CHECKING:
    from .row import QueueRow


class RowLoader:
    """Loads rows of one model held by a claim token, on one database."""

    def __init__(self, model: type[QueueRow], using: str) -> None:
        connection = connections[using]
        quote = connection.ops.quote_name
        opts = model._meta
        every = list(opts.concrete_fields)
        #: The claim's times, given rather than read (a field of the plain type only: a
        #: field of its own may convert its values its own way).
        self.given = tuple(
            field.attname
            for field in every
            if field.attname in CLAIM_TIMES and type(field) is models.DateTimeField
        )
        fields = [field for field in every if field.attname not in self.given]
        self.model = model
        self.using = using
        self.pk_field = opts.pk
        self.names = [field.attname for field in every]
        self._pk_at = fields.index(self.pk_field)
        # A row read, then the given values, put in the model's field order: one C call.
        order = [
            fields.index(field) if field in fields else len(fields) + self.given.index(field.attname)
            for field in every
        ]
        self._in_field_order = itemgetter(*order)
        #: (column index, its converters), for the columns that have converters only: most
        #: rows' values go through untouched.
        self.converters: list[tuple[int, list[Converter]]] = []
        for at, field in enumerate(fields):
            found = column_converters(field, connection)
            if found:
                self.converters.append((at, found))
        table = quote(opts.db_table)
        columns = ", ".join(f"{table}.{quote(cast(str, field.column))}" for field in fields)
        # The engine's fence: the claim's keys that still carry its token.
        self._sql = f"SELECT {columns} FROM {table} {statements(model, using).where}"

    def load(self, ids: Sequence[Any], claim: Claim) -> list[Any]:
        """The rows of ``ids`` that carry ``claim``'s token, as instances in the order of
        ``ids``; a converter's or an ``__init__``'s error goes up, as it would out of a
        QuerySet."""
        if not ids:
            return []
        connection = connections[self.using]
        prep = self.pk_field.get_db_prep_value
        keys = [prep(pk, connection) for pk in ids]
        with connection.cursor() as cursor:
            cursor.execute(self._sql.replace(KEYS, ", ".join(["%s"] * len(keys))), [*keys, claim.token])
            fetched = cursor.fetchall()
        from_db, using, names, converters = self.model.from_db, self.using, self.names, self.converters
        times = claim.times()
        given = tuple(times[name] for name in self.given)
        in_field_order = self._in_field_order
        by_key = {}
        for fetched_row in fetched:
            values = list(fetched_row)
            for at, found in converters:
                values[at] = converted(values[at], found, connection)
            # Keyed by the converted key, as the claim's locking read gave the keys: the
            # claim's order comes from ``ids`` without reading each instance's ``pk`` again.
            by_key[values[self._pk_at]] = from_db(using, names, in_field_order((*values, *given)))
        ordered = [by_key[pk] for pk in ids if pk in by_key]
        if len(ordered) != len(by_key):  # a key read back spelled unlike the claim's: by pk
            position = {pk: index for index, pk in enumerate(ids)}
            ordered = sorted(by_key.values(), key=lambda row: position[row.pk])
        return ordered


def loadable(model: type[models.Model]) -> bool:
    """Whether the claim's rows of ``model`` come from its own table alone, through the plain
    base manager: else a QuerySet loads them (joins of a parent table, a manager's filters)."""
    opts = model._meta
    # A proxy reads its concrete model's one table: only a concrete parent's table joins.
    concrete = cast(type[models.Model], opts.concrete_model)
    return not concrete._meta.parents and opts.base_manager_name is None


@lru_cache(maxsize=256)
def row_loader(model: type[QueueRow], using: str) -> RowLoader:
    """The loader of ``model`` on the database ``using``, built on first use."""
    return RowLoader(model, using)


__all__ = ["RowLoader", "loadable", "row_loader"]
