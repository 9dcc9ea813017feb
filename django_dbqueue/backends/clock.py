"""The database's clock: every queue time is compared on it, never on a worker host's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import models
from django.db.models.functions import Now
from django.utils import timezone


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
