"""The database's clock (``backends/clock.py``): ``DbNow``, ``db_now_plus``, ``read_now``,
``aware`` and ``QueueTimeField``. Every queue time is the server's, in UTC, whatever the session's
time zone or the inserting host's clock."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from django.db import connection
from django.db.models import DateTimeField

from django_dbqueue.backends import DbNow, QueueTimeField, aware, db_now_plus, read_now
from django_dbqueue.backends.base import QueueBackend
from django_dbqueue.compat import UTC
from tests.testapp.models import Job, Ledger

from .conftest import KIND, only, vendor

#: The servers run on this host: their clock and Python's agree to well within this.
SAME_HOST = timedelta(seconds=5)


def db_times(*expressions: object) -> tuple[datetime, ...]:
    """Evaluate ``expressions`` in one statement on the server (annotations of a row)."""
    Ledger.objects.get_or_create(kind=KIND, job_id=0, attempt=1)
    names = {f"e{i}": expression for i, expression in enumerate(expressions)}
    row = Ledger.objects.filter(kind=KIND).annotate(**names).values_list(*names).get()  # type: ignore[arg-type]
    return tuple(aware(value) for value in row)


def test_read_now_is_the_servers_utc_clock(backend: QueueBackend) -> None:
    now = read_now("default")
    assert now.tzinfo is not None and now.utcoffset() == timedelta(0)
    assert abs(now - datetime.now(UTC)) < SAME_HOST
    assert read_now("default") >= now  # the server's clock does not run backwards between reads


def test_dbnow_in_a_statement_is_read_now(backend: QueueBackend) -> None:
    before = read_now("default")
    (now,) = db_times(DbNow())
    assert before <= now <= read_now("default")


@only("mysql", "postgresql", reason="SQLite has no session time zone")
def test_a_session_time_zone_does_not_move_the_clock(backend: QueueBackend) -> None:
    before = read_now("default")
    with connection.cursor() as cursor:
        # MySQL's Now() (CURRENT_TIMESTAMP) follows the session's time_zone; DbNow must not.
        cursor.execute("SET time_zone = '+05:30'" if vendor() == "mysql" else "SET TIME ZONE '+05:30'")
    shifted = read_now("default")
    (in_statement,) = db_times(DbNow())
    assert timedelta(0) <= shifted - before < SAME_HOST
    assert timedelta(0) <= in_statement - before < SAME_HOST


def test_db_now_plus_adds_on_the_server(backend: QueueBackend) -> None:
    for delta in (timedelta(hours=1), timedelta(seconds=1.5), timedelta(days=-2)):
        now, later = db_times(DbNow(), db_now_plus(delta))
        # One statement, one clock reading: the difference is the delta exactly (to the µs).
        assert abs(later - now - delta) <= timedelta(milliseconds=1), (delta, later - now)


def test_aware_makes_naive_utc_aware_and_keeps_aware_times() -> None:
    naive = datetime(2026, 11, 27, 12, 0, 0, 123456)
    assert aware(naive) == naive.replace(tzinfo=UTC)
    elsewhere = datetime(2026, 11, 27, 17, 30, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    assert aware(elsewhere) is elsewhere


def test_a_queue_time_defaults_to_the_servers_clock(backend: QueueBackend) -> None:
    field = Job._meta.get_field("queue_enqueued_at")
    assert isinstance(field, QueueTimeField)
    assert isinstance(field.get_default(), DbNow)  # an expression sent in the INSERT, not a value
    before = read_now("default")
    job = Job.objects.create(name=KIND)
    after = read_now("default")
    stored = Job.objects.values_list("queue_enqueued_at", "queue_run_at").get(pk=job.pk)
    for value in stored:
        assert before <= value <= after
    job.refresh_from_db()
    assert before <= job.queue_enqueued_at <= after


def test_a_given_queue_time_is_kept(backend: QueueBackend) -> None:
    given = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    job = Job.objects.create(name=KIND, queue_run_at=given)
    assert Job.objects.values_list("queue_run_at", flat=True).get(pk=job.pk) == given


def test_migrations_see_a_plain_datetime_field() -> None:
    _, path, _, kwargs = Job._meta.get_field("queue_enqueued_at").deconstruct()
    assert path == "django.db.models.DateTimeField"
    assert isinstance(Job._meta.get_field("queue_enqueued_at"), DateTimeField)
    assert "db_default" not in kwargs
