"""The Spark pipeline against a real MariaDB and a local SparkSession (one for the whole run).

Skipped only where the pipeline cannot run: no pyspark, no Java, no JDBC jar, or a database
that is not MySQL/MariaDB (the SQLite and PostgreSQL runs of the suite).
"""

from __future__ import annotations

import csv
import importlib.util
import io
import os
import shutil
import signal
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.db.models import Count
from django.test import override_settings

from django_dbqueue.conf import settings as dbqueue_settings
from django_dbqueue.states import QueueState
from tests.conftest import wait_until
from tests.sparkapp.models import AccountSync, Delivery


def _missing() -> str | None:
    if not os.environ.get("DATABASE_URL", "").startswith("mysql"):
        return "the Spark pipeline targets MySQL/MariaDB (DATABASE_URL is not mysql://)"
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (pip install -e '.[dev]')"
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        return "no Java runtime (apt-get install default-jre-headless)"
    if not os.path.isfile(dbqueue_settings.SPARK_JDBC_JAR):
        return f"no MariaDB JDBC jar at {dbqueue_settings.SPARK_JDBC_JAR} (apt-get install libmariadb-java)"
    return None


MISSING = _missing()
pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(MISSING is not None, reason=MISSING or ""),
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture(scope="session")
def spark() -> Iterator:
    from django_dbqueue.spark import spark_session

    session = spark_session("local[2]", driver_memory="1g", log_level="ERROR")
    yield session
    session.stop()


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


def _db_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT UTC_TIMESTAMP(6)")
        return cursor.fetchone()[0].replace(tzinfo=UTC)


def test_enqueue_100k_rows_twice_is_idempotent(spark):
    from django_dbqueue.spark import enqueue_dataframe

    df = _accounts(spark, 1, 100_000).cache()
    before = _db_now()
    first = enqueue_dataframe(df, AccountSync, priority=5)
    assert (first.rows, first.inserted, first.skipped) == (100_000, 100_000, 0)
    assert first.chunks == 10
    second = enqueue_dataframe(df, AccountSync, priority=5)
    assert (second.rows, second.inserted, second.skipped) == (100_000, 0, 100_000)
    after = _db_now()

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
    before = _db_now()
    result = enqueue_dataframe(df, Delivery, run_at=timedelta(hours=1))
    assert (result.inserted, result.skipped) == (1_000, 0)
    assert enqueue_dataframe(df, Delivery).inserted == 0
    row = Delivery.objects.get(recipient="r0007@example.com")
    assert before + timedelta(hours=1) <= row.queue_run_at <= _db_now() + timedelta(hours=1)
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


# -- report -----------------------------------------------------------------------------------

BASE = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
HISTORY_DDL = """
CREATE TABLE {table} (
    id bigint NOT NULL AUTO_INCREMENT PRIMARY KEY,
    model varchar(100) NOT NULL,
    object_id varchar(64) NOT NULL,
    attempt integer NOT NULL,
    worker_id varchar(255) NOT NULL,
    enqueued_at datetime(6) NOT NULL,
    claimed_at datetime(6) NOT NULL,
    finished_at datetime(6) NULL,
    outcome varchar(16) NOT NULL,
    error longtext NOT NULL
)
"""


def _known_history() -> list[tuple]:
    """shop.Order: 100 attempts waiting i s and running i/10 s (i = 1..100); 91-95 fail for
    good, 96-100 are retried. mail.Email: 5 jobs, each retried once, then succeeded."""
    rows = []
    for i in range(1, 101):
        claimed = BASE + timedelta(seconds=i)
        finished = claimed + timedelta(microseconds=i * 100_000)
        outcome, error = "succeeded", ""
        if 91 <= i <= 95:
            outcome, error = (
                "failed",
                'Traceback (most recent call last):\n  File "x.py"\nValueError: card declined\n',
            )
        elif i > 95:
            outcome, error = "retried", "Traceback (most recent call last):\nTimeoutError: gateway"
        rows.append(("shop.Order", str(i), 1, "w1", BASE, claimed, finished, outcome, error))
    for j in range(1, 6):
        enq = BASE + timedelta(minutes=3)
        rows.append(
            (
                "mail.Email",
                str(j),
                1,
                "w2",
                enq,
                enq + timedelta(seconds=2),
                enq + timedelta(seconds=2.5),
                "retried",
                "ConnectionError: smtp down",
            )
        )
        rows.append(
            (
                "mail.Email",
                str(j),
                2,
                "w2",
                enq,
                enq + timedelta(seconds=12),
                enq + timedelta(seconds=12.5),
                "succeeded",
                "",
            )
        )
    # Outside the report's window: must not count.
    old = BASE - timedelta(days=2)
    rows.append(
        ("shop.Order", "1", 1, "w1", old, old, old + timedelta(seconds=1), "failed", "OldError: gone")
    )
    return rows


@pytest.fixture
def history_table() -> Iterator[str]:
    from django_dbqueue.spark import history_table

    table = history_table()
    with connection.cursor() as cursor:
        created = table not in connection.introspection.table_names(cursor)
        if created:
            cursor.execute(HISTORY_DDL.format(table=table))
        cursor.executemany(
            f"INSERT INTO {table} (model, object_id, attempt, worker_id, enqueued_at, claimed_at,"
            " finished_at, outcome, error) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [(*r[:4], *[t.replace(tzinfo=None) for t in r[4:7]], *r[7:]) for r in _known_history()],
        )
    yield table
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE {table}" if created else f"DELETE FROM {table}")


def test_report_numbers_match_a_history_with_known_timings(spark, history_table, tmp_path):
    from django_dbqueue.spark import queue_report

    report = queue_report(spark, out=tmp_path / "report", since=BASE - timedelta(hours=1))
    summary = {row["model"]: row for row in report.summary}
    assert set(summary) == {"shop.Order", "mail.Email"}

    order = summary["shop.Order"]
    assert (order["attempts"], order["jobs"], order["succeeded"], order["failed"], order["retried"]) == (
        100,
        100,
        90,
        5,
        5,
    )
    # Exact percentiles with linear interpolation over 1..100 s.
    assert order["wait_s_p50"] == pytest.approx(50.5)
    assert order["wait_s_p95"] == pytest.approx(95.05)
    assert order["wait_s_p99"] == pytest.approx(99.01)
    assert order["run_s_p50"] == pytest.approx(5.05)
    assert order["run_s_p95"] == pytest.approx(9.505)
    assert order["run_s_p99"] == pytest.approx(9.901)
    assert order["attempt_failure_rate"] == pytest.approx(0.10)
    assert order["job_failure_rate"] == pytest.approx(5 / 95)
    assert order["completed"] == 95 and order["minutes"] == 2
    assert order["completed_per_minute"] == pytest.approx(47.5)
    assert order["retried_jobs"] == 0 and order["max_attempt"] == 1
    assert order["first_finished"] == "2026-01-05T12:00:01.100000Z"

    email = summary["mail.Email"]
    assert (email["attempts"], email["jobs"], email["retried"], email["succeeded"]) == (10, 5, 5, 5)
    assert (email["retried_jobs"], email["max_attempt"]) == (5, 2)
    assert email["wait_s_p50"] == pytest.approx(7.0) and email["run_s_p99"] == pytest.approx(0.5)
    assert email["attempt_failure_rate"] == pytest.approx(0.5) and email["job_failure_rate"] == 0

    errors = [(e["model"], e["message"], e["count"]) for e in report.top_errors]
    assert errors == [
        ("mail.Email", "ConnectionError: smtp down", 5),
        ("shop.Order", "TimeoutError: gateway", 5),
        ("shop.Order", "ValueError: card declined", 5),
    ]

    # Per minute: finished at 1.1 * i s after 12:00 -> i <= 54 in the first minute.
    with open(report.files["per_minute.csv"]) as fh:
        per_minute = [r for r in csv.DictReader(fh) if r["model"] == "shop.Order"]
    assert [(r["minute"], r["attempts"], r["completed"]) for r in per_minute] == [
        ("2026-01-05T12:00:00.000000Z", "54", "54"),
        ("2026-01-05T12:01:00.000000Z", "46", "41"),
    ]
    with open(report.files["attempts.csv"]) as fh:
        attempts = [(r["model"], r["attempt"], r["attempts"]) for r in csv.DictReader(fh)]
    assert attempts == [("mail.Email", "1", "5"), ("mail.Email", "2", "5"), ("shop.Order", "1", "100")]

    for name in ("throughput.png", "latency.png"):
        assert report.files[name].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert report.files[name].stat().st_size > 10_000
    for name in ("summary", "per_minute", "top_errors", "attempts"):
        assert any(report.files[f"{name}.parquet"].glob("*.parquet"))
    markdown = report.files["report.md"].read_text()
    assert "| shop.Order | 100 | 100 | 90 | 5 | 5 |" in markdown
    assert "`ValueError: card declined`" in markdown and "OldError" not in markdown


def test_report_filters_by_model_and_window(spark, history_table, tmp_path):
    from django_dbqueue.spark import queue_report, read_history

    history = read_history(spark, models=["mail.Email"], until=BASE + timedelta(minutes=3, seconds=5))
    assert history.count() == 5
    report = queue_report(spark, out=tmp_path, models=["shop.Order"])
    assert [s["model"] for s in report.summary] == ["shop.Order"]
    assert report.summary[0]["attempts"] == 101  # with the old failure: no since=


def test_commands_enqueue_from_files_and_report(spark, history_table, tmp_path):
    parquet = tmp_path / "accounts.parquet"
    _accounts(spark, 1, 1_000).write.parquet(str(parquet))
    out = io.StringIO()
    call_command(
        "queue_spark_enqueue",
        "sparkapp.AccountSync",
        "--parquet",
        str(parquet),
        "--priority",
        "7",
        stdout=out,
    )
    assert "sparkapp.AccountSync: 1000 inserted, 0 already queued (of 1000 rows)" in out.getvalue()
    assert "chunk 1/1" in out.getvalue()

    csv_path = tmp_path / "more.csv"
    csv_path.write_text("acct,mail\n1000,a@example.com\n1001,b@example.com\n")
    out = io.StringIO()
    call_command(
        "queue_spark_enqueue",
        "sparkapp.AccountSync",
        "--csv",
        str(csv_path),
        "--columns",
        "acct:account_id,mail:email",
        "--delay",
        "60",
        stdout=out,
    )
    assert "1 inserted, 1 already queued (of 2 rows)" in out.getvalue()
    assert AccountSync.objects.get(account_id=1001).email == "b@example.com"
    assert AccountSync.objects.filter(queue_priority=7).count() == 1_000

    out = io.StringIO()
    call_command(
        "queue_spark_enqueue",
        "sparkapp.Delivery",
        "--table",
        "sparkapp_accountsync",
        "--columns",
        "email:recipient,email:subject,queue_state:campaign",
        stdout=out,
    )
    assert "1001 inserted" in out.getvalue()

    out = io.StringIO()
    call_command("queuereport", "--since", "2026-01-05T11:00", "--out", str(tmp_path / "r"), stdout=out)
    assert "shop.Order: 100 attempts, 100 jobs, failure rate 10.0 %" in out.getvalue()
    assert (tmp_path / "r" / "report.md").exists()


def test_commands_fail_with_clear_errors(spark, tmp_path):
    with pytest.raises(CommandError, match="does not exist"):
        call_command("queue_spark_enqueue", "sparkapp.AccountSync", "--parquet", str(tmp_path / "nope"))
    with pytest.raises(CommandError, match="Unknown model"):
        call_command("queue_spark_enqueue", "shop.Nope", "--csv", str(tmp_path))
    with pytest.raises(CommandError, match="one of the arguments --parquet --csv --table is required"):
        call_command("queue_spark_enqueue", "sparkapp.AccountSync")
    with pytest.raises(CommandError, match="needs a UNIQUE constraint"):
        call_command(
            "queue_spark_enqueue",
            "sparkapp.AccountSync",
            "--table",
            "sparkapp_accountsync",
            "--columns",
            "email",
            "--key",
            "email",
        )
    with override_settings(DBQUEUE_SPARK_JDBC_JAR=str(tmp_path / "missing.jar")):
        with pytest.raises(CommandError, match="MariaDB JDBC driver not found"):
            call_command("queuereport", "--out", str(tmp_path / "r"))
    with pytest.raises(CommandError, match="Unknown database alias"):
        call_command("queuereport", "--database", "nope")
