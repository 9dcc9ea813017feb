"""Multi-row INSERTs of new rows, from model instances or from plain mappings.

The ORM prepares every value of every row on its own: ``pre_save()``, then the field's
``get_db_prep_save()`` through several layers, eleven times per row for the queue columns
alone, and on MySQL/MariaDB the driver then escapes each parameter into the text. A batch of
new queue rows repeats the same few values (the defaults, the state, the priority), so each
distinct value of a column is prepared once per call, and the statement is written with
the plan of :mod:`django_dbqueue.insert`: the same SQL the ORM sends.

Loading work needs no model instances: a row may be a mapping of field names (or
attnames) to values. Missing fields take their defaults, and a callable default is called
once per call, not per row (except for unique fields, which need a value each). Such a
row's columns that hold the same value in every row are then prepared, and on MySQL/MariaDB
escaped by the driver's ``literal()``, once for the whole call.

Every row is checked and prepared before the first statement is sent: a bad row raises
and nothing is inserted. Models the plan does not cover (see ``insert_plan``), values that
are expressions and fields with their own ``pre_save()`` take the ORM's path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.core.exceptions import ValidationError
from django.db import connections, models, transaction

from .insert import (
    NOTHING,
    PLAIN_PRE_SAVES,
    BinaryValue,
    InsertPlan,
    insert_plan,
    kept_key,
    own_pre_save,
    sql_literal,
)

Row = models.Model | Mapping[str, Any]


class ByOrm(Exception):
    """A row the plan does not cover: the whole call takes the ORM's path."""


def insert_rows(
    model: type[models.Model],
    using: str,
    rows: Sequence[Row],
    batch_size: int,
    fixed: Mapping[str, Any] | None = None,
) -> None:
    """``INSERT INTO … VALUES (…), (…)`` of ``rows`` (instances of ``model`` or mappings),
    ``batch_size`` rows per statement (fewer if the backend limits parameters), in one
    transaction (the caller's, if any). ``fixed`` values go into every row whatever it says."""
    if not rows:
        return
    connection = connections[using]
    plan = insert_plan(model, connection)
    batch: Batch | None = None
    if plan is not None:
        connection.ensure_connection()  # literal() needs the driver's connection
        try:
            try:
                batch = Batch(plan, connection, rows, fixed or {}, plan.literal)
            except BinaryValue:  # a bytes literal is not text: parameters, as the ORM sends
                batch = Batch(plan, connection, rows, fixed or {}, False)
        except ByOrm:
            batch = None
    if batch is not None:
        # Prepared before the transaction: a bad row raises before it and leaves the
        # caller's transaction usable.
        with transaction.atomic(using=using, savepoint=False):
            batch.send(batch_size)
        return
    instances = [as_instance(model, row, fixed or {}) for row in rows]
    for instance in instances:
        instance._prepare_related_fields_for_save(operation_name="bulk_enqueue")  # as bulk_create does
    manager = model._base_manager.using(using)
    auto = model._meta.auto_field
    fields = [f for f in model._meta.concrete_fields if not f.generated and f is not auto]
    with transaction.atomic(using=using, savepoint=False):
        for start in range(0, len(instances), batch_size):
            manager._insert(instances[start : start + batch_size], fields=fields, using=using)


class Batch:
    """The rows of one call, prepared: a row's text on MySQL/MariaDB, its parameters elsewhere."""

    def __init__(
        self,
        plan: InsertPlan,
        connection: Any,
        rows: Sequence[Row],
        fixed: Mapping[str, Any],
        literal: bool,
    ) -> None:
        self.plan = plan
        self.connection = connection
        self.literal = literal
        self.model = plan.model
        fields = plan.fields
        self.index = {name: i for i, f in enumerate(fields) for name in (f.name, f.attname)}
        self.cache: dict[tuple[int, type, Any], Any] = {}
        self.last: list[tuple[Any, Any]] = [(NOTHING, None)] * len(fields)
        self.keeps = plan.keeps
        self.fixed = {self.index_of(name, None): value for name, value in fixed.items()}
        self.template: list[Any] | None = None
        # Unique fields with a callable default need a value per row, even in an empty row.
        self.per_row_defaults = any(f.unique and f.has_default() and callable(f.default) for f in fields)
        self.slots: dict[frozenset[str], list[tuple[int, str | None]]] = {}
        self.out: list[list[Any]] = []  # each row's cells, all columns
        # The plan's columns that may be left out when NULL (plan.nullable) some row fills.
        self.filled: set[int] = set()
        model = self.model
        for number, row in enumerate(rows):
            if type(row) is dict:  # before isinstance(Mapping): an ABC check per row is slow
                self.add_mapping(number, row)
            elif isinstance(row, model):
                self.add_instance(number, row)
            elif isinstance(row, Mapping):
                self.add_mapping(number, row)
            else:
                raise TypeError(
                    f"rows must be {self.model.__name__} objects or mappings of field names to "
                    f"values, not {type(row).__name__} (row {number})"
                )

    def index_of(self, name: str, number: int | None) -> int:
        try:
            return self.index[name]
        except KeyError:
            where = "" if number is None else f" (row {number})"
            raise ValueError(
                f"{self.model._meta.label} has no field {name!r} to insert{where}; "
                f"fields: {', '.join(f.name for f in self.plan.fields)}"
            ) from None

    def cell(self, number: int, index: int, value: Any) -> Any:
        """A value as it goes into the statement, prepared once per call if it repeats."""
        known, cell = self.last[index]
        if value is known:
            return cell
        if hasattr(value, "resolve_expression"):
            raise ByOrm
        key = (index, *kept) if self.keeps[index] and (kept := kept_key(value)) is not None else None
        if key is not None:
            try:
                return self.cache[key]
            except KeyError:
                pass
        field = self.plan.fields[index]
        try:
            prepared = field.get_db_prep_save(value, self.connection)
        except (TypeError, ValueError, ValidationError) as exc:
            where = f"row {number}" if number >= 0 else "default"
            raise ValueError(
                f"{where}: {value!r} is not a valid {field.name} of {self.model._meta.label}: {exc}"
            ) from exc
        cell = sql_literal(self.connection, prepared) if self.literal else prepared
        if key is not None:
            self.cache[key] = cell
            self.last[index] = (value, cell)
        return cell

    def add_instance(self, number: int, row: models.Model) -> None:
        row._prepare_related_fields_for_save(operation_name="bulk_enqueue")  # as bulk_create does
        for index, value in self.fixed.items():
            setattr(row, self.plan.fields[index].attname, value)
        cell = self.cell
        cells = [cell(number, i, field.pre_save(row, True)) for i, field in enumerate(self.plan.fields)]
        self.note_filled(cells, self.plan.nullable)
        self.out.append(cells)

    def add_mapping(self, number: int, row: Mapping[str, Any]) -> None:
        if self.template is None:
            self.template = self.common_cells()
            self.note_filled(self.template, self.plan.nullable)
        if not row and not self.per_row_defaults:
            self.out.append(self.template)  # every cell common to the call
            return
        keys = frozenset(row)
        slots = self.slots.get(keys)
        if slots is None:
            slots = self.slots[keys] = self.slots_for(keys, number)
        cells = list(self.template)
        fields = self.plan.fields
        for index, key in slots:
            if key is None:  # a unique field's callable default: a value per row
                value = fields[index].get_default()
            else:
                value = row[key]
                field = fields[index]
                if key == field.name and field.is_relation and isinstance(value, models.Model):
                    value = related_key(field, value, number)
            cells[index] = self.cell(number, index, value)
        self.note_filled(cells, [index for index, _ in slots])
        self.out.append(cells)

    def note_filled(self, cells: list[Any], columns: Sequence[int]) -> None:
        """Note which of the leave-out-able ``columns`` hold a value in this row."""
        nullable = self.plan.nullable
        for index in columns:
            cell = cells[index]
            if index in nullable and (cell != "NULL" if self.literal else cell is not None):
                self.filled.add(index)

    def common_cells(self) -> list[Any]:
        """The cells of a row given as an empty mapping: the defaults, called once."""
        template = self.model()
        for index, value in self.fixed.items():
            setattr(template, self.plan.fields[index].attname, value)
        cells = []
        for index, field in enumerate(self.plan.fields):
            if type(field).pre_save not in PLAIN_PRE_SAVES:
                raise ByOrm  # a field that computes its value in pre_save(), e.g. a file
            cells.append(self.cell(-1, index, field.pre_save(template, True)))
        return cells

    def slots_for(self, keys: frozenset[str], number: int) -> list[tuple[int, str | None]]:
        """Where a mapping with ``keys`` puts its own values; None: a per-row default."""
        slots: dict[int, str | None] = {}
        for key in sorted(keys, key=str):
            index = self.index_of(key, number)
            if index in slots:
                raise ValueError(f"row {number} names {self.plan.fields[index].name} twice ({key!r})")
            if index not in self.fixed and not own_pre_save(self.plan.fields[index]):
                slots[index] = key  # auto_now fields and fixed values take no value from a row
        for index, field in enumerate(self.plan.fields):
            if index not in slots and field.unique and field.has_default() and callable(field.default):
                slots[index] = None
        return sorted(slots.items())

    def send(self, batch_size: int) -> None:
        plan, connection = self.plan, self.connection
        # The columns no row fills are left out of every statement (they are NULL).
        shape = plan.shape(tuple(index for index in plan.nullable if index not in self.filled))
        fields = [plan.fields[index] for index in shape.kept]
        size = max(min(batch_size, connection.ops.bulk_batch_size(fields, self.out) or batch_size), 1)
        if self.literal:
            template = self.template
            common = None if template is None else "(" + ", ".join(shape.pick(template)) + ")"
            rows: list[Any] = [
                common if cells is template else "(" + ", ".join(shape.pick(cells)) + ")"
                for cells in self.out
            ]
        else:
            rows = [shape.pick(cells) for cells in self.out]
        with connection.cursor() as cursor:
            for start in range(0, len(rows), size):
                chunk = rows[start : start + size]
                if self.literal:
                    # Every cell is the driver's literal() of a prepared value: mysqlclient
                    # would build the very same text from parameters (see insert.py).
                    cursor.execute(shape.head + ", ".join(chunk))
                else:
                    cursor.execute(
                        shape.head + ", ".join([shape.marks] * len(chunk)),
                        [param for row in chunk for param in row],
                    )


def related_key(field: Any, value: models.Model, number: int) -> Any:
    key = getattr(value, field.target_field.attname)
    if key is None:
        raise ValueError(f"row {number}: {field.name} is an unsaved {type(value).__name__} (no primary key)")
    return key


def as_instance(model: type[models.Model], row: Row, fixed: Mapping[str, Any]) -> models.Model:
    """A row as a model instance, for the ORM's path."""
    if isinstance(row, model):
        instance = row
    elif isinstance(row, Mapping):
        names = {f.name for f in model._meta.concrete_fields} | {
            f.attname for f in model._meta.concrete_fields
        }
        unknown = sorted(set(row) - names)
        if unknown:
            raise ValueError(f"{model._meta.label} has no field {unknown[0]!r} to insert")
        instance = model(**row)
    else:
        raise TypeError(f"rows must be {model.__name__} objects or mappings, not {type(row).__name__}")
    for name, value in fixed.items():
        setattr(instance, name, value)
    return instance
