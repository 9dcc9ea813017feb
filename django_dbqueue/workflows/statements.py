"""The statements of every workflow run, built once per database: the read of the row's
checkpoints and the INSERT of a new one; and ``send_event()``'s two (:class:`EventStatements`).

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

from dataclasses import dataclass
from datetime import datetime
from functools import cache, lru_cache
from typing import Any, cast

from django.db import connections, models
from django.db.models.sql import Query

from ..backends import DbNow, column_converters, converted, quoted_column
from ..states import QueueState
from ..tables.workflow import WorkflowEvent, WorkflowStep


class StepStatements:
    """The checkpoint table's per-run statements on one database."""

    def __init__(self, using: str) -> None:
        connection = connections[using]
        quote = connection.ops.quote_name
        fields = list(WorkflowStep._meta.concrete_fields)
        assert fields[0].primary_key, "insert() makes its instance from the values in field order"
        self.using = using
        self._names = [field.attname for field in fields]
        self._converters = [column_converters(field, connection) for field in fields]
        self._written = [field for field in fields if not field.primary_key]
        table = quote(WorkflowStep._meta.db_table)
        model, object_pk = (quoted_column(connection, WorkflowStep, name) for name in ("model", "object_pk"))
        every = ", ".join(quote(cast(str, field.column)) for field in fields)
        self._load = f"SELECT {every} FROM {table} WHERE {model} = %s AND {object_pk} = %s"
        self._table = table
        self._columns = [quote(cast(str, field.column)) for field in self._written]
        #: The INSERT of a new checkpoint by the written columns it lists (see insert()).
        self._inserts: dict[tuple[int, ...], str] = {}
        # A new checkpoint's values in field order: what a run does not give is the field's
        # default (none of them is callable: checked here, so a new field with one fails loudly).
        self._defaults: list[Any] = []
        for field in self._written:
            default = field.get_default()
            assert not (field.has_default() and callable(field.default)), f"{field.name}: a callable default"
            # insert() leaves a None out of the INSERT, for the column's own default: NULL.
            assert not field.has_db_default(), f"{field.name}: a database default is not NULL"
            self._defaults.append(default)
        self._slots = {field.attname: at for at, field in enumerate(self._written)}
        # Converted values that come from code, not from rows (the model's label, the step's
        # name, kind and position, a wait's event name, the timed-out flag): each converts to
        # the same parameter every time (get_db_prep_save), so once per value, not per run.
        code = ("model", "name", "kind", "position", "event", "timed_out")
        self._constant = {at for at, field in enumerate(self._written) if field.name in code}
        self._prepared: dict[tuple[int, Any], Any] = {}
        #: A step checkpoint's INSERT by model, name, position and whether it has a result.
        self._shapes: dict[tuple[str, str, int, bool], _StepShape] = {}
        self._object_pk, self._started, self._finished, self._result = (
            cast(models.Field, WorkflowStep._meta.get_field(name))
            for name in ("object_pk", "started_at", "finished_at", "result")
        )
        #: Where each field's value stands in an instance's values (the pk first).
        self._value_at = {field.attname: at for at, field in enumerate(fields)}
        # A claim's preload reads its rows' checkpoints and their events in one statement (a
        # UNION ALL: each side's columns NULL on the other's rows), where it was two round
        # trips; built once, as through the ORM each read went through the query compiler
        # once per claim (about 8% of a profiled 1-step workflow drain's time, at claims of
        # 6 rows).
        event_fields = list(WorkflowEvent._meta.concrete_fields)
        self._event_names = [field.attname for field in event_fields]
        self._event_converters = [column_converters(field, connection) for field in event_fields]
        events = quote(WorkflowEvent._meta.db_table)
        event_model, event_object_pk = (
            quoted_column(connection, WorkflowEvent, name) for name in ("model", "object_pk")
        )
        event_every = ", ".join(quote(cast(str, field.column)) for field in event_fields)
        no_steps = ", ".join(["NULL"] * len(fields))
        no_events = ", ".join(["NULL"] * len(event_fields))
        # Events oldest first: by their pk, the first of their columns (in the result's numbers).
        self._preload = (
            f"SELECT {every}, {no_events} FROM {table} WHERE {model} = %s AND {object_pk} IN (<keys>) "
            f"UNION ALL SELECT {no_steps}, {event_every} FROM {events} "
            f"WHERE {event_model} = %s AND {event_object_pk} IN (<keys>) ORDER BY {len(fields) + 1}"
        )

    def load(self, model: str, object_pk: str) -> dict[str, WorkflowStep]:
        """The checkpoints of the row ``model`` ``object_pk`` by name: one SELECT."""
        connection = connections[self.using]
        with connection.cursor() as cursor:
            cursor.execute(self._load, [model, object_pk])
            rows = cursor.fetchall()
        return self.checkpoints(rows)

    def preload(
        self, model: str, object_pks: list[str]
    ) -> tuple[dict[str, dict[str, WorkflowStep]], dict[str, list[WorkflowEvent]]]:
        """The checkpoints (by row and name) and the events not received (by row, oldest
        first) of the rows ``object_pks`` of ``model``: one SELECT (the caller bounds the IN
        lists: a claim's rows)."""
        connection = connections[self.using]
        marks = ", ".join(["%s"] * len(object_pks))
        with connection.cursor() as cursor:
            cursor.execute(self._preload.replace("<keys>", marks), [model, *object_pks] * 2)
            rows = cursor.fetchall()
        steps = len(self._names)
        found: dict[str, dict[str, WorkflowStep]] = {pk: {} for pk in object_pks}
        # A side's own key (its first column) is NULL on the other side's rows.
        for step in self.instances([row[:steps] for row in rows if row[0] is not None]):
            found[step.object_pk][step.name] = step
        sent: dict[str, list[WorkflowEvent]] = {pk: [] for pk in object_pks}
        for row in rows:
            if row[steps] is None:
                continue
            converters = self._event_converters
            values = [converted(value, converters[at], connection) for at, value in enumerate(row[steps:])]
            event = WorkflowEvent.from_db(self.using, self._event_names, values)
            sent[event.object_pk].append(event)
        return found, sent

    def checkpoints(self, rows: list[tuple[Any, ...]]) -> dict[str, WorkflowStep]:
        """Checkpoints by name from rows of the table's columns (in field order)."""
        return {step.name: step for step in self.instances(rows)}

    def instances(self, rows: list[tuple[Any, ...]]) -> list[WorkflowStep]:
        """Checkpoints from rows of the table's columns (in field order)."""
        connection = connections[self.using]
        steps = []
        for row in rows:
            values = [converted(value, self._converters[at], connection) for at, value in enumerate(row)]
            steps.append(WorkflowStep.from_db(self.using, self._names, values))
        return steps

    def insert(self, **given: Any) -> WorkflowStep:
        """INSERT a new checkpoint of the columns ``given`` (the others their defaults) and
        return it (its pk stays None: nothing reads it by pk). The instance is made as
        ``from_db()`` makes one, from the values in field order: a run writes a checkpoint
        per step, and ``Model(**kwargs)`` costs twice the calls for the same instance."""
        values = list(self._defaults)
        for name, value in given.items():
            values[self._slots[name]] = value
        # A None is left out: the column's default is NULL, which is what a None parameter
        # stores (a step's wake_at, most steps' result). A parameter costs the database
        # driver's quoting and its field's conversion; a step's checkpoint has two fewer.
        listed = tuple(at for at, value in enumerate(values) if value is not None)
        connection = connections[self.using]
        params = [self._prepare(at, values[at], connection) for at in listed]
        with connection.cursor() as cursor:
            cursor.execute(self._insert_of(listed), params)
        make: Any = WorkflowStep  # its values in field order, the pk first (the stubs type keywords)
        return cast(WorkflowStep, make(None, *values))

    def insert_step(
        self,
        model: str,
        object_pk: str,
        name: str,
        position: int,
        started_at: datetime,
        finished_at: datetime,
        result: Any,
    ) -> WorkflowStep:
        """:meth:`insert` of a finished step's checkpoint, the one every workflow run writes:
        its statement and the parameters that come from code (the model's label, the step's
        name and position, the kind's and the defaults') made once per shape
        (:class:`_StepShape`); only the row's key, the two times and a result are converted
        per run, the key and the times as prepared values (``get_db_prep_value(prepared=True)``:
        a string, and aware datetimes of the claim's clock, which ``get_prep_value()`` would
        give back as they are)."""
        shape_key = (model, name, position, result is None)
        shape = self._shapes.get(shape_key)
        if shape is None:
            shape = _StepShape(self, model, name, position, with_result=result is not None)
            if len(self._shapes) < _KEPT:
                self._shapes[shape_key] = shape
        connection = connections[self.using]
        params = list(shape.params)
        params[shape.object_pk] = self._object_pk.get_db_prep_value(object_pk, connection, prepared=True)
        params[shape.started_at] = self._started.get_db_prep_value(started_at, connection, prepared=True)
        params[shape.finished_at] = self._finished.get_db_prep_value(finished_at, connection, prepared=True)
        if shape.result is not None:
            params[shape.result] = self._result.get_db_prep_save(result, connection)
        with connection.cursor() as cursor:
            cursor.execute(shape.sql, params)
        values = list(shape.values)
        values[self._value_at["object_pk"]] = object_pk
        values[self._value_at["started_at"]] = started_at
        values[self._value_at["finished_at"]] = finished_at
        values[self._value_at["result"]] = result
        make: Any = WorkflowStep  # as insert() makes it
        return cast(WorkflowStep, make(*values))

    def _insert_of(self, listed: tuple[int, ...]) -> str:
        """The INSERT of the written columns ``listed`` (a few shapes: built once each)."""
        sql = self._inserts.get(listed)
        if sql is None:
            columns = ", ".join(self._columns[at] for at in listed)
            marks = ", ".join(["%s"] * len(listed))
            sql = self._inserts[listed] = f"INSERT INTO {self._table} ({columns}) VALUES ({marks})"
        return sql

    def _prepare(self, at: int, value: Any, connection: Any) -> Any:
        """``value`` of the ``at``-th written field as a parameter (``get_db_prep_save()``,
        as ``save()`` converts it), kept for the values that come from code (see __init__)."""
        if at not in self._constant:
            return self._written[at].get_db_prep_save(value, connection)
        key = (at, value)
        prepared = self._prepared.get(key, _MISSING)
        if prepared is _MISSING:
            prepared = self._written[at].get_db_prep_save(value, connection)
            if len(self._prepared) < _KEPT:
                self._prepared[key] = prepared
        return prepared


class _StepShape:
    """A step checkpoint's INSERT for one model, step name and position, with or without a
    result (:meth:`StepStatements.insert_step`): its SQL, its parameters with those that come
    from code converted (the others' places noted), and the instance's values in field order."""

    def __init__(
        self, statements: StepStatements, model: str, name: str, position: int, with_result: bool
    ) -> None:
        values = list(statements._defaults)
        given = {"model": model, "name": name, "kind": WorkflowStep.STEP, "position": position}
        for field, value in given.items():
            values[statements._slots[field]] = value
        # Placeholders (not None, so insert()'s rule of a None left out keeps their columns).
        per_run = ["object_pk", "started_at", "finished_at"] + (["result"] if with_result else [])
        for field in per_run:
            values[statements._slots[field]] = _MISSING
        listed = tuple(at for at, value in enumerate(values) if value is not None)
        connection = connections[statements.using]
        self.sql = statements._insert_of(listed)
        self.params = tuple(
            None if values[at] is _MISSING else statements._prepare(at, values[at], connection)
            for at in listed
        )
        where = {at: index for index, at in enumerate(listed)}
        self.object_pk = where[statements._slots["object_pk"]]
        self.started_at = where[statements._slots["started_at"]]
        self.finished_at = where[statements._slots["finished_at"]]
        self.result = where[statements._slots["result"]] if with_result else None
        # The instance's values: the pk first (None: nothing reads it by pk), then the fields'.
        self.values = (None, *(None if value is _MISSING else value for value in values))


_MISSING = object()
#: At most this many converted constants per database (labels, kinds, event names: a few).
_KEPT = 1024


@cache
def step_statements(using: str) -> StepStatements:
    return StepStatements(using)


class HoldStatement:
    """Atomic mode's first statement of a workflow run (``@workflow`` hands it to the worker
    as ``process.hold``): the claim's fenced row lock and the read of the row's checkpoints
    in one round trip, where a lock and a read were two::

        SELECT <queue pk>, <checkpoint columns> FROM <queue table>
        LEFT JOIN <checkpoints> ON model = %s AND object_pk = %s
        WHERE <queue pk> = %s AND queue_token = %s FOR UPDATE [OF <queue table>]

    No row: the claim is lost (nothing runs). One row of NULL checkpoint columns: held, no
    checkpoint yet. ``OF`` where the database has it (PostgreSQL refuses to lock the nullable
    side of an outer join); MariaDB locks the row's checkpoints too, which only runs of this
    row (holding its lock first) and operators' forks (the same) write."""

    def __init__(self, model: type[models.Model], using: str) -> None:
        connection = connections[using]
        quote = connection.ops.quote_name
        features = connection.features
        self.using = using
        self.pk_field = model._meta.pk
        table, steps = quote(model._meta.db_table), quote(WorkflowStep._meta.db_table)

        def column(of: type[models.Model], name: str) -> str:
            return quoted_column(connection, of, name)

        events = quote(WorkflowEvent._meta.db_table)
        self._steps = len(WorkflowStep._meta.concrete_fields)
        event_fields = list(WorkflowEvent._meta.concrete_fields)
        self._event_names = [field.attname for field in event_fields]
        self._event_converters = [column_converters(field, connection) for field in event_fields]
        every = ", ".join(
            [f"{steps}.{quote(cast(str, field.column))}" for field in WorkflowStep._meta.concrete_fields]
            + [f"{events}.{quote(cast(str, field.column))}" for field in event_fields]
        )
        pk = f"{table}.{quote(cast(str, self.pk_field.column))}"
        lock = ""
        if features.has_select_for_update:
            lock = f" FOR UPDATE OF {table}" if features.has_select_for_update_of else " FOR UPDATE"
        self._sql = (
            f"SELECT {pk}, {every} FROM {table} "
            f"LEFT JOIN {steps} ON {steps}.{column(WorkflowStep, 'model')} = %s "
            f"AND {steps}.{column(WorkflowStep, 'object_pk')} = %s "
            f"LEFT JOIN {events} ON {events}.{column(WorkflowEvent, 'model')} = %s "
            f"AND {events}.{column(WorkflowEvent, 'object_pk')} = %s "
            f"WHERE {pk} = %s AND {table}.{column(model, 'queue_token')} = %s{lock}"
        )

    def hold(self, key: dict[str, str], pk: Any, token: int) -> Held | None:
        """Lock the row ``pk`` if the claim ``token`` still holds it and return its
        checkpoints by name and its events not received, oldest first; None if the claim is
        lost. (Each checkpoint comes once per event: the joins' product, small.)"""
        connection = connections[self.using]
        keys = [key["model"], key["object_pk"]] * 2
        with connection.cursor() as cursor:
            cursor.execute(self._sql, [*keys, self.pk_field.get_db_prep_value(pk, connection), token])
            rows = cursor.fetchall()
        if not rows:
            return None
        # A joined table's own key (its first column) is NULL when the join found none.
        first_event = 1 + self._steps
        step_rows = {row[1]: row[1:first_event] for row in rows if row[1] is not None}
        event_rows = {row[first_event]: row[first_event:] for row in rows if row[first_event] is not None}
        events = []
        for at in sorted(event_rows):
            values = [
                converted(value, self._event_converters[index], connection)
                for index, value in enumerate(event_rows[at])
            ]
            events.append(WorkflowEvent.from_db(self.using, self._event_names, values))
        return Held(step_statements(self.using).checkpoints(list(step_rows.values())), events)


@dataclass
class Held:
    """What :class:`HoldStatement` read with the row's lock."""

    checkpoints: dict[str, WorkflowStep]
    #: The events sent to the row and not received yet, oldest first.
    events: list[WorkflowEvent]
    #: Read behind the row's lock (no send can add one before the run commits), or before
    #: it (a claim's preload: one may come in between, which a wait's park looks for).
    locked: bool = True


@lru_cache(maxsize=256)
def hold_statement(model: type[models.Model], using: str) -> HoldStatement:
    return HoldStatement(model, using)


class EventStatements:
    """``send_event()``'s two statements for one queue model on one database (issue #36: a
    wake costs at most two), built once as the checkpoints' are:

    * the event's INSERT, whose rows come from a locking read of the queue row
      (``INSERT … SELECT … FROM <queue table> WHERE pk = %s FOR UPDATE``): one round trip
      that writes the event and takes the row's lock, which orders this send with a run
      parking the row (events.py says how). A row that is gone gets no event;
    * the wake: ``UPDATE … SET queue_run_at = <now>`` fenced by the row being READY and a
      wait for this event being open in its checkpoints. It runs after the lock is held, so
      its read of the checkpoints (a fresh snapshot per statement in READ COMMITTED) sees the
      wait of a run that committed while this send waited for the lock.

    Values are parameters converted by their fields; the database's clock is its own
    ``DbNow()`` compiled once (the events' ``sent_at`` and the wake time)."""

    def __init__(self, model: type[models.Model], using: str) -> None:
        connection = connections[using]
        quote = connection.ops.quote_name
        self.using = using
        self.pk_field = model._meta.pk
        self._data = cast(models.Field, WorkflowEvent._meta.get_field("data"))

        def column(of: type[models.Model], name: str) -> str:
            return quoted_column(connection, of, name)

        query = Query(None)
        now, now_params = DbNow().resolve_expression(query).as_sql(query.get_compiler(using), connection)
        assert not now_params, "the clock takes no parameter"
        table, pk = quote(model._meta.db_table), quote(cast(str, self.pk_field.column))
        sent = ("model", "object_pk", "name", "data", "sent_at")
        events = ", ".join(column(WorkflowEvent, name) for name in sent)
        lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
        self._send = (
            f"INSERT INTO {quote(WorkflowEvent._meta.db_table)} ({events}) "
            f"SELECT %s, %s, %s, %s, {now} FROM {table} WHERE {pk} = %s{lock}"
        )
        steps = quote(WorkflowStep._meta.db_table)
        waiting = " AND ".join(
            [f"{column(WorkflowStep, name)} = %s" for name in ("model", "object_pk", "kind", "event")]
            + [f"{column(WorkflowStep, 'finished_at')} IS NULL"]
        )
        self._wake = (
            f"UPDATE {table} SET {column(model, 'queue_run_at')} = {now} "
            f"WHERE {pk} = %s AND {column(model, 'queue_state')} = %s "
            f"AND EXISTS (SELECT 1 FROM {steps} WHERE {waiting})"
        )

    def send(self, key: dict[str, str], pk: Any, name: str, data: Any) -> bool:
        """INSERT the event ``name`` for the row ``pk`` and lock the row; False if it is gone."""
        connection = connections[self.using]
        params = [
            key["model"],
            key["object_pk"],
            name,
            self._data.get_db_prep_save(data, connection),
            self.pk_field.get_db_prep_value(pk, connection),
        ]
        with connection.cursor() as cursor:
            cursor.execute(self._send, params)
            return cursor.rowcount == 1

    def wake(self, key: dict[str, str], pk: Any, name: str) -> bool:
        """Make the row ``pk`` due now if it is READY and waits for ``name``; whether it was."""
        connection = connections[self.using]
        params = [
            self.pk_field.get_db_prep_value(pk, connection),
            str(QueueState.READY),
            key["model"],
            key["object_pk"],
            WorkflowStep.WAIT,
            name,
        ]
        with connection.cursor() as cursor:
            cursor.execute(self._wake, params)
            return cursor.rowcount == 1


@lru_cache(maxsize=256)
def event_statements(model: type[models.Model], using: str) -> EventStatements:
    return EventStatements(model, using)
