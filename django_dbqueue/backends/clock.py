"""The database's clock: every queue time is compared on it, never on a worker host's."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import connections, models
from django.db.models.functions import Now
from django.db.models.sql import Query
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from django_dbqueue.compat import UTC


class DbNow(Now):
    """The database's current time in UTC, whatever the session's time zone.

    Django's ``Now()`` is ``CURRENT_TIMESTAMP(6)`` on MySQL, which follows the session
    ``time_zone``; Django stores UTC there (USE_TZ), so compare with ``UTC_TIMESTAMP(6)``.
    """

    def as_mysql(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        return self.as_sql(compiler, connection, template="UTC_TIMESTAMP(6)", **extra_context)


def db_now_plus(delta: timedelta) -> models.Expression:
    """``DbNow() + delta`` as a datetime expression (an INTERVAL on MySQL)."""
    return models.ExpressionWrapper(
        DbNow() + models.Value(delta, output_field=models.DurationField()),
        output_field=models.DateTimeField(),
    )


def aware(value: datetime) -> datetime:
    """A database time read back as an annotation: SQLite hands back naive text (UTC, since
    USE_TZ is required); the others an aware datetime already."""
    return timezone.make_aware(value, UTC) if timezone.is_naive(value) else value


def read_now(using: str) -> datetime:
    """The database's clock, read once (for an operation that needs "now" as a value, e.g.
    a cutoff it then compares in Python or passes on)."""
    connection = connections[using]
    query = Query(None)
    query.add_annotation(DbNow(), "now")
    sql, params = query.get_compiler(connection=connection).as_sql()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        value = cursor.fetchone()[0]
    if isinstance(value, str):  # SQLite: text, UTC
        value = parse_datetime(value)
    return aware(value)


class _InsertClock(DbNow):
    """:class:`DbNow` as ``QueueTimeField``'s default: one shared instance, nothing to resolve.

    A new row's two queue times took two ``DbNow()`` per ``save()``, each built in
    ``Model.__init__`` and copied again by ``resolve_expression()`` in the INSERT (issue #33).
    It has no source expressions and no state a query could change, so resolving it is itself."""

    def resolve_expression(self, *args: Any, **kwargs: Any) -> _InsertClock:
        return self


#: The default of every queue time field (see ``QueueTimeField.get_default``).
INSERT_CLOCK = _InsertClock()


class QueueTimeField(models.DateTimeField):
    """A queue time that a new row takes from the database's clock, not the inserting host's.

    Its default is ``DbNow()``, sent in the INSERT (an unsaved row holds the expression, as a
    ``db_default`` field holds ``DatabaseDefault``; Django 6 reads the value back after
    ``save()``, and ``QueueMixin.save()`` makes it a deferred field on Django 5.2). A value
    the caller gives (a datetime, a ``run_at``) is kept. A host whose clock is an hour ahead
    so enqueues rows due now, not in an hour.

    Migrations see the ``DateTimeField(default=timezone.now)`` the column always was (the
    default was never part of the schema), so no queue model needs a new migration; forms
    still offer this host's time as the initial value a person edits.
    """

    def get_default(self) -> Any:
        return INSERT_CLOCK

    def clean(self, value: Any, model_instance: Any) -> Any:
        if hasattr(value, "resolve_expression"):  # full_clean() of an unsaved row
            return value
        return super().clean(value, model_instance)

    def deconstruct(self) -> Any:
        name, _path, args, kwargs = super().deconstruct()
        return name, "django.db.models.DateTimeField", args, kwargs
