"""The Spark pipeline's enqueue and reads against a real MariaDB and a local SparkSession (one
for the whole run; the report is tested in test_spark_report.py).

Skipped only where the pipeline cannot run: no pyspark, no Java, no JDBC jar, or a database
that is not MySQL/MariaDB (the SQLite and PostgreSQL runs of the suite).
"""

from __future__ import annotations

import signal
from datetime import datetime, timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.db.models import Count

from django_dbqueue.compat import UTC
from django_dbqueue.states import QueueState
from tests.conftest import wait_until
from tests.spark_support import db_now, spark_marks
from tests.sparkapp.models import AccountSync, Delivery

pytestmark = spark_marks()


def _accounts(spark, first: int, last: int):
    from pyspark.sql import functions as sf

    return spark.range(first, last + 1).select(
        sf.col("id").alias("account_id"),
        sf.concat(sf.lit("user"), sf.col("id"), sf.lit("@example.com")).alias("email"),
    )


def _staging_tables() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SHOW TABLES LIKE 'dbqueue\\_stage\\_%%'")
        return [row[0] for row in cursor.fetchall()]


def test_enqueue_100k_rows_twice_is_idempotent(spark):
    from django_dbqueue.spark import enqueue_dataframe

    df = _accounts(spark, 1, 100_000).cache()
    before = db_now()
    first = enqueue_dataframe(df, AccountSync, priority=5)
    assert (first.rows, first.inserted, first.skipped) == (100_000, 100_000, 0)
    assert first.chunks == 10
    second = enqueue_dataframe(df, AccountSync, priority=5)
    assert (second.rows, second.inserted, second.skipped) == (100_000, 0, 100_000)
    after = db_now()

    assert AccountSync.objects.count() == 100_000
    assert set(
        AccountSync.objects.values_list("queue_state", "queue_priority", "queue_attempts").distinct()
    ) == {(QueueState.READY, 5, 0)}
    row = AccountSync.objects.get(account_id=4242)
    assert row.email == "user4242@example.com"
    assert before <= row.queue_enqueued_at <= after
    assert before <= row.queue_run_at <= after
    assert row.queue_last_error == "" and row.queue_token is None and row.handled == 0
    # Due now: the worker's claim query sees them.
    assert AccountSync.queue_queryset().ready().count() == 100_000

    # 5,000 known keys, 5,000 new ones, and 1,000 rows repeated inside the DataFrame.
    overlap = _accounts(spark, 95_001, 105_000).unionAll(_accounts(spark, 104_001, 105_000))
    third = enqueue_dataframe(overlap, "sparkapp.AccountSync", key_columns=["account_id"], batch_size=3_000)
    assert (third.rows, third.inserted, third.skipped) == (11_000, 5_000, 6_000)
    assert AccountSync.objects.count() == 105_000
    assert AccountSync.objects.filter(queue_priority=0).count() == 5_000  # the field's default
    assert _staging_tables() == []
    df.unpersist()


def test_composite_key_defaults_and_delay(spark):
    from pyspark.sql import functions as sf

    from django_dbqueue.spark import enqueue_dataframe

    df = spark.range(0, 1_000).select(
        sf.lit("winter").alias("campaign"),
        sf.format_string("r%04d@example.com", sf.col("id")).alias("recipient"),
        sf.lit("Hello").alias("subject"),
    )
    before = db_now()
    result = enqueue_dataframe(df, Delivery, run_at=timedelta(hours=1))
    assert (result.inserted, result.skipped) == (1_000, 0)
    assert enqueue_dataframe(df, Delivery).inserted == 0
    row = Delivery.objects.get(recipient="r0007@example.com")
    assert before + timedelta(hours=1) <= row.queue_run_at <= db_now() + timedelta(hours=1)
    assert Delivery.queue_queryset().ready().count() == 0  # not due for an hour


def test_enqueue_refuses_what_would_break_idempotency(spark):
    from django_dbqueue.spark import enqueue_dataframe

    df = _accounts(spark, 1, 10)
    with pytest.raises(ImproperlyConfigured, match=r"needs a UNIQUE constraint on exactly \(email\)"):
        enqueue_dataframe(df, AccountSync, key_columns=["email"])
    with pytest.raises(ImproperlyConfigured, match="is not a field or column"):
        enqueue_dataframe(df.withColumnRenamed("email", "mail"), AccountSync)
    with pytest.raises(ImproperlyConfigured, match="the queue sets queue_state itself"):
        enqueue_dataframe(df.selectExpr("*", "'running' AS queue_state"), AccountSync)
    with pytest.raises(ImproperlyConfigured, match="lacks the key column"):
        enqueue_dataframe(df.select("email"), AccountSync)
    deliveries = spark.range(3).selectExpr("'c' AS campaign", "CAST(id AS STRING) AS recipient")
    with pytest.raises(ImproperlyConfigured, match=r"\['subject'\] have no default"):
        enqueue_dataframe(deliveries, Delivery)
    with pytest.raises(ImproperlyConfigured, match="not a concrete QueueMixin model"):
        enqueue_dataframe(df, "testapp.Ledger")
    with pytest.raises(ImproperlyConfigured, match="pass key_columns"):
        enqueue_dataframe(spark.range(3).selectExpr("'x' AS subject"), "testapp.Ticket")
    assert AccountSync.objects.count() == 0 and _staging_tables() == []


@pytest.mark.processes
def test_enqueue_while_two_workers_drain_the_table(spark, start_worker):
    from django_dbqueue.spark import enqueue_dataframe

    workers = [
        start_worker("sparkapp.AccountSync", "--worker-id", f"spark-w{n}", "--batch-size", "50")
        for n in (1, 2)
    ]
    AccountSync.objects.create(account_id=0)  # a sentinel: both workers are up once it is done
    assert wait_until(lambda: AccountSync.objects.filter(queue_state=QueueState.SUCCEEDED).exists(), 60)

    total = 20_000
    df = _accounts(spark, 1, total).cache()
    df.count()
    finished_during = []

    def progress(message: str) -> None:
        if message.startswith("chunk"):
            finished_during.append(AccountSync.objects.filter(queue_state=QueueState.SUCCEEDED).count())

    result = enqueue_dataframe(df, AccountSync, batch_size=500, progress=progress)
    assert (result.inserted, result.skipped, result.chunks) == (total, 0, 40)
    # The workers claimed and finished rows between the chunks: no chunk held them off.
    assert finished_during[-1] > finished_during[0] > 0

    again = enqueue_dataframe(df, AccountSync, batch_size=5_000)  # while they still drain
    assert (again.inserted, again.skipped) == (0, total)
    assert wait_until(
        lambda: not AccountSync.objects.exclude(queue_state=QueueState.SUCCEEDED).exists(), 240, 0.5
    ), AccountSync.objects.exclude(queue_state=QueueState.SUCCEEDED).count()
    for worker in workers:
        worker.signal(signal.SIGTERM)
        assert worker.wait(60) == 0, worker.output
    assert AccountSync.objects.count() == total + 1
    assert set(AccountSync.objects.values_list("handled", flat=True).distinct()) == {1}
    by_worker = dict(AccountSync.objects.values_list("queue_locked_by").annotate(n=Count("id")))
    assert len(by_worker) == 2, by_worker
    # The workers' attempt history, read back through Spark.
    from django_dbqueue.spark import read_history

    history = read_history(spark, models=["sparkapp.AccountSync"])
    assert history.where("outcome = 'succeeded'").count() == total + 1
    # Each attempt records when it was due, at or before its claim: the report's wait counts from it.
    assert history.where("due_at IS NULL OR due_at > claimed_at").count() == 0

    # A re-run never re-queues finished work.
    assert enqueue_dataframe(df, AccountSync).inserted == 0
    assert not AccountSync.objects.exclude(queue_state=QueueState.SUCCEEDED).exists()
    df.unpersist()


def test_enqueue_messages_with_json_payloads(spark):
    from django_dbqueue.models import Message
    from django_dbqueue.spark import enqueue_messages

    df = spark.range(1, 1_001).selectExpr(
        "CONCAT('welcome:', id) AS key", "CONCAT('user', id, '@example.com') AS to", "id AS user_id"
    )
    first = enqueue_messages(df, "email.welcome", priority=2)
    assert (first.inserted, first.skipped) == (1_000, 0)
    assert enqueue_messages(df, "email.welcome").inserted == 0
    # Same keys, another kind: other messages.
    assert enqueue_messages(df.limit(10), "email.reminder", payload_columns=["to"]).inserted == 10
    message = Message.objects.get(kind="email.welcome", key="welcome:7")
    assert message.payload == {"to": "user7@example.com", "user_id": 7}
    assert (message.queue, message.queue_priority, message.queue_state) == ("default", 2, QueueState.READY)
    assert Message.objects.get(kind="email.reminder", key="welcome:7").payload == {"to": "user7@example.com"}
    # A NULL key cannot be de-duplicated: refused before anything is inserted.
    nulls = spark.range(3).selectExpr("IF(id = 1, NULL, CONCAT('k', id)) AS key")
    with pytest.raises(ImproperlyConfigured, match="1 of 3 rows have a NULL key"):
        enqueue_messages(nulls, "email.nokey")
    assert not Message.objects.filter(kind="email.nokey").exists() and _staging_tables() == []


TZ_VALUES = [
    datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
    datetime(2026, 3, 8, 2, 30, 0, 123456, tzinfo=UTC),  # a DST gap in America/New_York
    datetime(2026, 3, 29, 2, 30, 0, 500000, tzinfo=UTC),  # and in Europe
    datetime(2026, 10, 25, 1, 59, 59, 999999, tzinfo=UTC),
    datetime(2038, 1, 19, 3, 14, 8, 654321, tzinfo=UTC),
    datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
]


def test_timezone_round_trip_is_exact_to_the_microsecond(spark):
    from pyspark.sql import functions as sf

    from django_dbqueue.spark import enqueue_dataframe, read_queue

    rows = [(n, ts, ts) for n, ts in enumerate(TZ_VALUES, 1)]
    df = spark.createDataFrame(rows, "account_id long, seen_at timestamp, queue_run_at timestamp")
    assert enqueue_dataframe(df, AccountSync).inserted == len(TZ_VALUES)

    # Spark -> MariaDB: exact, as Django reads it back.
    stored = dict(AccountSync.objects.values_list("account_id", "seen_at"))
    assert stored == {n: ts for n, ts, _ in rows}
    assert dict(AccountSync.objects.values_list("account_id", "queue_run_at")) == stored
    with connection.cursor() as cursor:
        cursor.execute("SELECT CAST(seen_at AS CHAR) FROM sparkapp_accountsync WHERE account_id = 2")
        assert cursor.fetchone()[0] == "2026-03-08 02:30:00.123456"

    # MariaDB -> Spark: exact as Spark shows it and as collect() hands it to Python.
    queue = read_queue(spark, AccountSync).orderBy("account_id")
    shown = queue.select(sf.date_format("seen_at", "yyyy-MM-dd HH:mm:ss.SSSSSS").alias("s")).collect()
    assert [r.s for r in shown] == [f"{ts:%Y-%m-%d %H:%M:%S.%f}" for ts in TZ_VALUES]
    collected = [r.seen_at for r in queue.select("seen_at").collect()]
    assert collected == [ts.replace(tzinfo=None) for ts in TZ_VALUES]
    micros = [r.u for r in queue.select(sf.unix_micros("queue_run_at").alias("u")).collect()]
    assert micros == [
        (ts - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1) for ts in TZ_VALUES
    ]
    assert read_queue(spark, AccountSync).rdd.getNumPartitions() == 2  # id ranges
