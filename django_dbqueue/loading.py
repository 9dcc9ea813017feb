"""Claimed rows to model instances, with less Python per row than the ORM's iterator.

A lease-mode worker claims a batch of whole rows and runs a handler on each. Reading them
through the ORM (compiler, ``ModelIterable``, per-row converters, ``Model.from_db`` and
``Model.__init__``) costs more CPU per job than everything else the worker does for it, so
the claim reads plain tuples and this module turns them into the same instances:

* each column's converters are the ones the compiler would apply (the backend's, then the
  field's), looked up once per claim rather than resolved per row;
* datetime columns convert each distinct value once: rows enqueued together share their
  times, and the database clock read with the claim is the same on every row;
* on MySQL/MariaDB datetime columns are read as text (``CAST(… AS CHAR)``) and parsed with
  ``datetime.fromisoformat``: mysqlclient's own parser is Python code and several times
  slower. Text it does not read the way mysqlclient would (zero dates) goes to
  mysqlclient's parser;
* an instance is made the way ``Model.from_db`` makes it, but without the call chain when
  the model cannot tell the difference (see :func:`_plain_construction`); otherwise by
  ``from_db`` itself, so overrides and ``pre_init``/``post_init`` receivers still run.

None of this runs while claim locks are held: the claim commits first.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Any

from django.db import models
from django.db.models.base import ModelState
from django.db.models.fields.related_descriptors import ForeignKeyDeferredAttribute
from django.db.models.query_utils import DeferredAttribute
from django.db.models.signals import post_init, pre_init

Converter = Callable[[Any, Any, Any], Any]

_MISSING = object()


@dataclass(frozen=True)
class RowLayout:
    """What each column of a claim's SELECT holds.

    ``expressions[i]`` is the expression whose converters apply to column ``i`` (a field's
    column, or the database clock); ``attnames[i]`` is the attribute it fills, None for a
    column that is not a field. ``text_datetimes`` are the columns read as text.
    """

    model: type[models.Model]
    attnames: tuple[str | None, ...]
    expressions: tuple[Any, ...]
    text_datetimes: frozenset[int]


def converters_for(layout: RowLayout, connection: Any) -> list[tuple[int, list[Converter], Any, bool]]:
    """Per column that needs work: (index, converters, expression, cache distinct values)."""
    plan = []
    for index, expression in enumerate(layout.expressions):
        converters = connection.ops.get_db_converters(expression) + expression.get_db_converters(connection)
        if index in layout.text_datetimes:
            if converters == [connection.ops.convert_datetimefield_value]:
                # The MySQL backend's one converter (make_aware with the connection's zone),
                # fused with the parsing: two calls fewer per value.
                converters = [_aware_mysql_datetime(connection.timezone)]
            else:
                converters = [_parse_mysql_datetime, *converters]
        if converters:
            # A plain DateTimeField's values are immutable and convert the same way every
            # time: worth converting once per distinct value. Other converters (a JSONField's)
            # may return mutable objects, which rows must not share.
            cached = type(expression.output_field) is models.DateTimeField
            plan.append((index, converters, expression, cached))
    return plan


def convert_rows(rows: Sequence[Sequence[Any]], layout: RowLayout, connection: Any) -> list[list[Any]]:
    """The rows as the compiler would hand them to ``from_db``: every converter applied."""
    converted = [list(row) for row in rows]
    for index, converters, expression, cached in converters_for(layout, connection):
        if cached:
            seen: dict[Any, Any] = {}
            for row in converted:
                raw = row[index]
                value = seen.get(raw, _MISSING)
                if value is _MISSING:
                    value = raw
                    for converter in converters:
                        value = converter(value, expression, connection)
                    seen[raw] = value
                row[index] = value
        else:
            for row in converted:
                value = row[index]
                for converter in converters:
                    value = converter(value, expression, connection)
                row[index] = value
    return converted


def instances(
    model: type[models.Model],
    using: str,
    attnames: Sequence[str],
    rows: Sequence[Sequence[Any]],
    overrides: dict[str, Any],
) -> list[models.Model]:
    """Instances of ``model`` loaded from ``rows`` (values of ``attnames``; the model's other
    concrete fields stay deferred), then with ``overrides`` assigned, as by ``setattr`` after
    ``from_db``."""
    if _plain_construction(model) and not (pre_init.has_listeners(model) or post_init.has_listeners(model)):
        new = model.__new__
        result = []
        for row in rows:
            obj = new(model)
            state = ModelState()
            state.adding = False
            state.db = using
            values = obj.__dict__
            values["_state"] = state
            values.update(zip(attnames, row, strict=False))  # a row may end with other columns
            values.update(overrides)
            result.append(obj)
        return result
    result = []
    for row in rows:
        obj = model.from_db(using, attnames, row)
        for name, value in overrides.items():
            setattr(obj, name, value)
        result.append(obj)
    return result


@functools.cache
def _plain_construction(model: type[models.Model]) -> bool:
    """Whether filling ``__dict__`` makes the same instance as ``from_db``.

    ``Model.from_db`` calls ``Model.__init__``, which (for a positional, complete row) sends
    ``pre_init``, creates ``_state``, ``setattr``s each loaded field and sends ``post_init``.
    That is a plain ``__dict__`` update when no class of the model overrides any step and
    every field's class attribute is Django's plain deferred-loading descriptor (whose
    ``__set__``, if any, only drops a related object cached on the instance: a new instance
    has none). Receivers are checked per call, as they can connect at any time.
    """
    for klass in model.__mro__:
        if klass in (models.Model, object):
            continue
        if any(name in vars(klass) for name in ("__init__", "__new__", "__setattr__", "from_db")):
            return False
    plain = (DeferredAttribute, ForeignKeyDeferredAttribute)
    for field in model._meta.concrete_fields:
        descriptor = _class_attribute(model, field.attname)
        if type(descriptor) not in plain:
            return False
    return True


def _class_attribute(model: type, name: str) -> Any:
    for klass in model.__mro__:
        if name in vars(klass):
            return vars(klass)[name]
    return None


def _parse_mysql_datetime(value: Any, expression: Any, connection: Any) -> datetime | None:
    """A DATETIME read as text, to the naive datetime mysqlclient would have returned."""
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value)
    except (TypeError, ValueError):
        from MySQLdb.times import DateTime_or_None  # '0000-00-00 …' and the like: None

        return DateTime_or_None(value)


def convert_value(layout: RowLayout, value: Any, connection: Any) -> Any:
    """One value of a one-column layout, converted as :func:`convert_rows` would."""
    [(_, converters, expression, _)] = converters_for(layout, connection) or [(0, [], None, False)]
    for converter in converters:
        value = converter(value, expression, connection)
    return value


@functools.cache
def _aware_mysql_datetime(zone: tzinfo) -> Converter:
    """``_parse_mysql_datetime`` then the backend's ``convert_datetimefield_value`` (which
    is ``make_aware(value, zone)``: the naive value given the zone)."""

    def convert(value: Any, expression: Any, connection: Any) -> datetime | None:
        if value is None:
            return None
        try:
            naive = datetime.fromisoformat(value)
        except (TypeError, ValueError):
            naive = _parse_mysql_datetime(value, expression, connection)
            if naive is None:
                return None
        return naive.replace(tzinfo=zone)

    return convert
