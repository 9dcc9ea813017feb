"""What a claim hands the handler: the same instances the ORM would load, on every backend.

A claim of the whole table reads plain tuples and builds the instances itself
(``django_dbqueue.loading``); a claim of a filtered QuerySet goes through the ORM. Both must
give rows equal, field by field, to the row read back from the database.
"""

from __future__ import annotations

import zoneinfo
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction
from django.db.models.signals import post_init
from django.utils import timezone

from django_dbqueue import loading
from django_dbqueue.models import QUEUE_FIELDS
from django_dbqueue.query import _claim_statement, _claim_update, new_token
from django_dbqueue.states import QueueState
from tests.testapp.models import HostileJob, Job, Noop, Ticket

pytestmark = pytest.mark.django_db(transaction=True)

#: Left deferred by every claim: loaded from the database if a handler reads them.
DEFERRED = {"queue_last_error", "queue_finished_at"}

#: Assigned by the claim itself rather than loaded.
SET_BY_CLAIM = {
    "queue_state",
    "queue_token",
    "queue_locked_by",
    "queue_locked_until",
    "queue_last_attempt_at",
}

PATHS = {
    "whole table": lambda model: model.queue_queryset("default"),
    "filtered": lambda model: model.queue_queryset("default").filter(queue_priority__gte=-1000),
}


def assert_same_as_database(row) -> None:
    """Every loaded attribute equals (value and type) the row read back now; the deferred
    ones are still deferred and load the database's value on access."""
    fresh = type(row).objects.get(pk=row.pk)
    assert row.get_deferred_fields() == DEFERRED
    assert row._state.adding is False
    assert row._state.db == "default"
    for field in type(row)._meta.concrete_fields:
        if field.attname in DEFERRED:
            continue
        mine, theirs = getattr(row, field.attname), getattr(fresh, field.attname)
        assert mine == theirs, field.attname
        if field.attname not in SET_BY_CLAIM:  # assigned, as always, e.g. a QueueState member
            assert type(mine) is type(theirs), field.attname
        if isinstance(mine, datetime):
            assert mine.utcoffset() == timedelta(0), field.attname
    for name in DEFERRED:
        assert getattr(row, name) == getattr(fresh, name)
    assert row.get_deferred_fields() == set()


@pytest.mark.parametrize("path", list(PATHS))
def test_claimed_rows_equal_the_database_rows(path: str) -> None:
    exact = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)  # no fraction: DATETIME(6) text ends .000000
    Job.objects.create(name="a", note="ü ∑ ☃", sleep=0.25, fail_times=2, queue_run_at=exact)
    Job.objects.create(name="b", queue_priority=-3, queue_run_at=exact - timedelta(microseconds=1))
    Job.objects.create(name="c", queue_last_error="earlier traceback", queue_attempts=2)
    qs = PATHS[path](Job)
    assert qs._is_whole_table() is (path == "whole table")
    rows = qs.claim(limit=10, worker_id="w-rows", lease=60)
    assert len(rows) == 3
    claim = rows[0]._queue_claim
    assert claim is not None and all(r._queue_claim is claim for r in rows)
    for row in rows:
        assert row.queue_state == QueueState.RUNNING
        assert row.queue_token == claim.token
        assert row.queue_locked_by == "w-rows"
        assert row.queue_last_attempt_at == claim.claimed_at
        assert row.queue_locked_until == claim.claimed_at + timedelta(seconds=60)
        assert_same_as_database(row)
    assert {r.name: r.queue_attempts for r in rows} == {"a": 1, "b": 1, "c": 3}


@pytest.mark.parametrize("path", list(PATHS))
def test_converted_fields_boolean_and_json(path: str) -> None:
    """Fields with converters (a boolean on MySQL, JSON everywhere) convert like the ORM, and
    equal JSON values are not one shared object."""
    Ticket.objects.create(subject="t", handled=True, customer=7)
    Ticket.objects.create(subject="u", handled=False)
    for row in PATHS[path](Ticket).claim(limit=10):
        assert_same_as_database(row)
    HostileJob.objects.create(data={"n": 1, "items": [1, 2]})
    HostileJob.objects.create(data={"n": 1, "items": [1, 2]})
    HostileJob.objects.create(data=None)
    rows = PATHS[path](HostileJob).claim(limit=10)
    for row in rows:
        assert_same_as_database(row)
    with_data = [r for r in rows if r.data is not None]
    assert len(with_data) == 2 and with_data[0].data is not with_data[1].data


def test_rows_enqueued_together_share_their_times() -> None:
    """One UPDATE queues many rows at one database time: each row still gets that time."""
    Noop.objects.bulk_create([Noop(payload=str(i)) for i in range(20)])
    assert Noop.objects.all().enqueue() == 20
    rows = Noop.queue_queryset("default").claim(limit=20)
    assert len({r.queue_run_at for r in rows}) == 1
    for row in rows:
        assert_same_as_database(row)


def test_claimed_times_are_utc_whatever_the_current_time_zone() -> None:
    Job.objects.create(name="tz")
    with timezone.override(zoneinfo.ZoneInfo("America/New_York")):
        [row] = Job.objects.claim()
    assert row.queue_run_at.utcoffset() == timedelta(0)
    assert_same_as_database(row)


def test_post_init_receivers_and_from_db_overrides_still_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model that could tell the difference is built by Model.from_db, as the ORM does."""
    seen: list[int] = []

    def receiver(sender, instance, **kwargs) -> None:
        seen.append(instance.pk)

    Job.objects.create(name="x")
    Job.objects.create(name="y")
    post_init.connect(receiver, sender=Job)
    try:
        rows = Job.objects.claim(limit=5)
    finally:
        post_init.disconnect(receiver, sender=Job)
    assert sorted(seen) == sorted(r.pk for r in rows) and len(rows) == 2
    for row in rows:
        assert_same_as_database(row)

    loaded: list[int] = []
    original = Job.from_db.__func__

    def from_db(cls, db, field_names, values):
        obj = original(cls, db, field_names, values)
        loaded.append(obj.pk)
        return obj

    Job.objects.create(name="z")
    loading._plain_construction.cache_clear()
    monkeypatch.setattr(Job, "from_db", classmethod(from_db))
    try:
        [row] = Job.objects.claim()
    finally:
        monkeypatch.undo()
        loading._plain_construction.cache_clear()
    assert loaded == [row.pk]
    assert_same_as_database(row)
    assert loading._plain_construction(Job)


def test_the_statement_selects_like_claim_candidates() -> None:
    """The cached statement has the WHERE, LIMIT and locking clause of the ORM's claim
    SELECT (the one the EXPLAIN tests check), and the same plan where there is one."""
    with transaction.atomic():
        orm_sql, orm_params = Job.objects.all().claim_candidates(100).query.sql_with_params()
        statement = _claim_statement(Job, "default", 100)

    def where(sql: str) -> str:
        return sql.split(" WHERE ", 1)[1].split(" ORDER BY ", 1)[0]

    def tail(sql: str) -> str:
        return sql.split(" LIMIT ", 1)[1]

    assert where(statement.sql) == where(orm_sql)
    assert tail(statement.sql) == tail(orm_sql)
    assert tuple(statement.params) == tuple(orm_params)
    if connection.vendor in ("mysql", "postgresql"):
        Job.objects.bulk_create([Job(name=str(i), queue_priority=i % 3) for i in range(200)])
        with transaction.atomic(), connection.cursor() as cursor:
            plans = []
            for sql, params in ((orm_sql, orm_params), (statement.sql, statement.params)):
                cursor.execute("EXPLAIN " + sql, params)
                names = [c[0] for c in cursor.description]
                plans.append([dict(zip(names, row, strict=True)) for row in cursor.fetchall()])
        if connection.vendor == "mysql":
            orm_plan, our_plan = plans
            assert [(s["key"], s["type"]) for s in our_plan] == [(s["key"], s["type"]) for s in orm_plan]
            assert our_plan[0]["key"] == Job._meta.indexes[0].name
            assert "filesort" not in (our_plan[0]["Extra"] or "")
        else:
            assert plans[1] == plans[0]


def test_integer_and_other_ids_both_claim() -> None:
    """Integer ids are written into the UPDATE; anything else is passed as parameters."""
    a, b = Job.objects.create(name="a"), Job.objects.create(name="b")
    now = timezone.now()
    for ids in ([a.pk], [str(b.pk)]):
        sql, params = _claim_update(Job, "default", ids, new_token(), "w", now + timedelta(seconds=5), now)
        in_list = sql.split(" IN (", 1)[1].split(")", 1)[0]
        assert in_list == ("%s" if isinstance(ids[0], str) else str(ids[0]))
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, params)
            assert cursor.rowcount == 1
    for job in (a, b):
        job.refresh_from_db()
        assert job.queue_state == QueueState.RUNNING and job.queue_attempts == 1


@pytest.mark.skipif("connection.vendor != 'sqlite'")
def test_sqlite_compare_and_set_keeps_only_rows_won() -> None:
    """Without row locks a row read by the claim may be taken before its UPDATE: the claim
    keeps only the rows its UPDATE took."""
    jobs = [Job.objects.create(name=str(i)) for i in range(3)]
    taken = jobs[1]

    def steal(execute, sql, params, many, context):
        if sql.startswith("UPDATE") and "queue_attempts" in sql and params and "w-cas" in params:
            # Another claimer's UPDATE commits first (SQLite: same connection, same effect).
            execute(
                'UPDATE "testapp_job" SET "queue_state" = %s, "queue_token" = %s WHERE "id" = %s',
                [QueueState.RUNNING.value, 42, taken.pk],
                False,
                context,
            )
        return execute(sql, params, many, context)

    with connection.execute_wrapper(steal):
        rows = Job.objects.claim(limit=10, worker_id="w-cas")
    assert sorted(r.pk for r in rows) == sorted([jobs[0].pk, jobs[2].pk])
    taken.refresh_from_db()
    assert taken.queue_token == 42 and taken.queue_attempts == 0


def test_queue_fields_are_all_known() -> None:
    # The claim reads every queue column but the deferred ones, and sets the rest itself.
    with transaction.atomic():
        statement = _claim_statement(Job, "default", 1)
    read = set(statement.layout.attnames)
    assert {"queue_state", "queue_priority", "queue_run_at", "queue_attempts", "queue_enqueued_at"} <= read
    assert read.isdisjoint(DEFERRED) and set(QUEUE_FIELDS) - read >= DEFERRED


@pytest.mark.skipif("connection.vendor != 'mysql'")
def test_datetime_text_reads_like_mysqlclient() -> None:
    """DATETIME text parses to what mysqlclient returns for the column, zero dates included
    (None), with or without a fraction, as text or bytes."""
    from MySQLdb.times import DateTime_or_None

    convert = loading._aware_mysql_datetime(UTC)
    for text in (
        "2026-11-23 03:08:00.123456",
        "2026-11-23 03:08:00.000000",
        "2026-11-23 03:08:00",
        "0000-00-00 00:00:00.000000",
        b"2026-11-23 03:08:00.5",
        None,
    ):
        expected = None if text is None else DateTime_or_None(text)
        assert loading._parse_mysql_datetime(text, None, connection) == expected
        aware = convert(text, None, connection)
        assert aware == (None if expected is None else expected.replace(tzinfo=UTC))


@pytest.mark.parametrize("path", list(PATHS))
def test_rows_that_fail_to_load_are_given_back(path: str) -> None:
    """Loading runs after the claim committed (no user code under the claim's locks); if it
    raises, the rows are READY again with the attempt not counted, as when the ORM path's
    transaction rolls back."""
    jobs = [Job.objects.create(name=str(i)) for i in range(3)]

    def explode(sender, instance, **kwargs) -> None:
        raise RuntimeError("cannot load this row")

    post_init.connect(explode, sender=Job)
    try:
        with pytest.raises(RuntimeError, match="cannot load"):
            PATHS[path](Job).claim(limit=10)
    finally:
        post_init.disconnect(explode, sender=Job)
    for job in jobs:
        job.refresh_from_db()
        assert (job.queue_state, job.queue_attempts, job.queue_token) == (QueueState.READY, 0, None)
