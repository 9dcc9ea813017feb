"""The Spark history report and the two commands, against histories with known timings in
the real attempt-history table (MariaDB) and a local SparkSession.

Each history is built so that the right figure and the misleading one differ: partial edge
minutes, a thousand messages that differ only by an id, and a bulk retry of two-week-old
failures.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import override_settings

from django_dbqueue.compat import UTC
from tests.spark_support import attempt, spark_marks
from tests.sparkapp.models import AccountSync

pytestmark = spark_marks()

BASE = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)


def _known_history() -> list[dict]:
    """shop.Order: 100 attempts waiting i s and running i/10 s (i = 1..100); 91-95 fail for
    good, 96-100 are retried. mail.Email: 5 jobs, retried once after a 10 s backoff, then
    succeeded. One old failure outside the report's window."""
    rows = []
    for i in range(1, 101):
        claimed = BASE + i * SECOND
        outcome, error = "succeeded", ""
        if 91 <= i <= 95:
            outcome = "failed"
            error = 'Traceback (most recent call last):\n  File "x.py"\nValueError: card declined\n'
        elif i > 95:
            outcome, error = "retried", "Traceback (most recent call last):\nTimeoutError: gateway"
        rows.append(
            attempt(
                "shop.Order", i, 1, enqueued=BASE, due=BASE, claimed=claimed,
                finished=claimed + i * timedelta(milliseconds=100), outcome=outcome, error=error,
            )
        )  # fmt: skip
    enq = BASE + timedelta(minutes=3)
    for j in range(1, 6):
        rows.append(
            attempt(
                "mail.Email", j, 1, enqueued=enq, due=enq, claimed=enq + 2 * SECOND,
                finished=enq + 2.5 * SECOND, outcome="retried", error="ConnectionError: smtp down",
                worker="w2",
            )
        )  # fmt: skip
        # Due again 10 s after its enqueue (the backoff), claimed 2 s later.
        rows.append(
            attempt(
                "mail.Email", j, 2, enqueued=enq, due=enq + 10 * SECOND, claimed=enq + 12 * SECOND,
                finished=enq + 12.5 * SECOND, worker="w2",
            )
        )  # fmt: skip
    old = BASE - timedelta(days=2)
    rows.append(
        attempt(
            "shop.Order", 1, 1, enqueued=old, due=old, claimed=old, finished=old + SECOND,
            outcome="failed", error="OldError: gone",
        )
    )  # fmt: skip
    return rows


def _csv(report, name: str) -> list[dict]:
    with open(report.files[f"{name}.csv"]) as fh:
        return list(csv.DictReader(fh))


def test_report_numbers_match_a_history_with_known_timings(spark, attempt_history, tmp_path):
    from django_dbqueue.spark import queue_report

    attempt_history(_known_history())
    report = queue_report(spark, out=tmp_path / "report", since=BASE - timedelta(hours=1))
    summary = {row["model"]: row for row in report.summary}
    assert set(summary) == {"shop.Order", "mail.Email"}

    order = summary["shop.Order"]
    counts = ("attempts", "jobs", "succeeded", "failed", "retried")
    assert tuple(order[k] for k in counts) == (100, 100, 90, 5, 5)
    # Exact percentiles with linear interpolation over 1..100 s.
    assert order["wait_s_p50"] == pytest.approx(50.5)
    assert order["wait_s_p95"] == pytest.approx(95.05)
    assert order["wait_s_p99"] == pytest.approx(99.01)
    assert order["run_s_p50"] == pytest.approx(5.05)
    assert order["run_s_p95"] == pytest.approx(9.505)
    assert order["run_s_p99"] == pytest.approx(9.901)
    # End to end over the 95 attempts that ended their job: 1.1 * (1..95) s.
    assert order["e2e_s_p50"] == pytest.approx(52.8)
    assert order["e2e_s_p95"] == pytest.approx(1.1 * 90.3)
    assert order["e2e_s_p99"] == pytest.approx(1.1 * 94.06)
    assert order["attempt_failure_rate"] == pytest.approx(0.10)
    assert order["job_failure_rate"] == pytest.approx(5 / 95)
    # Finishes from 12:00:01.1 to 12:01:50: both minutes partial, no full one, so the rate is
    # over the real 108.9 s window (not 95 per 2 "minutes" = 47.5).
    assert order["completed"] == 95 and order["full_minutes"] == 0
    assert order["window_s"] == pytest.approx(108.9)
    assert order["completed_per_minute"] == pytest.approx(95 / 108.9 * 60)
    assert order["rate_basis"] == "window"
    assert order["retried_jobs"] == 0 and order["max_attempt"] == 1
    assert order["first_finished"] == "2026-01-05T12:00:01.100000Z"
    assert order["wait_from_enqueued"] == 0

    email = summary["mail.Email"]
    assert (email["attempts"], email["jobs"], email["retried"], email["succeeded"]) == (10, 5, 5, 5)
    assert (email["retried_jobs"], email["max_attempt"]) == (5, 2)
    # Both attempts waited 2 s after they were due; the 10 s backoff is not queue delay.
    assert email["wait_s_p50"] == pytest.approx(2.0) and email["wait_s_p99"] == pytest.approx(2.0)
    assert email["e2e_s_p50"] == pytest.approx(12.5) and email["run_s_p99"] == pytest.approx(0.5)
    assert email["attempt_failure_rate"] == pytest.approx(0.5) and email["job_failure_rate"] == 0

    errors = [(e["model"], e["exception"], e["message"], e["count"]) for e in report.top_errors]
    assert errors == [
        ("mail.Email", "ConnectionError", "smtp down", 5),
        ("shop.Order", "TimeoutError", "gateway", 5),
        ("shop.Order", "ValueError", "card declined", 5),
    ]

    # Per minute: finished at 1.1 * i s after 12:00 -> i <= 54 in the first minute.
    per_minute = [r for r in _csv(report, "per_minute") if r["model"] == "shop.Order"]
    assert [(r["minute"], r["attempts"], r["completed"], r["partial"]) for r in per_minute] == [
        ("2026-01-05T12:00:00.000000Z", "54", "54", "True"),
        ("2026-01-05T12:01:00.000000Z", "46", "41", "True"),
    ]
    attempts = [(r["model"], r["attempt"], r["attempts"]) for r in _csv(report, "attempts")]
    assert attempts == [("mail.Email", "1", "5"), ("mail.Email", "2", "5"), ("shop.Order", "1", "100")]

    for name in ("throughput.png", "latency.png"):
        assert report.files[name].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert report.files[name].stat().st_size > 10_000
    for name in ("summary", "per_minute", "top_errors", "attempts"):
        assert any(report.files[f"{name}.parquet"].glob("*.parquet"))
    markdown = report.files["report.md"].read_text()
    assert "| shop.Order | 100 | 100 | 90 | 5 | 5 |" in markdown
    assert "| 52.3 | 108.9 s window (no full minute) |" in markdown
    assert "| ValueError | `card declined` |" in markdown and "OldError" not in markdown


def test_rate_per_minute_counts_full_minutes_only(spark, attempt_history, tmp_path):
    """One job finishing every 0.5 s from 12:10:45 to 12:14:14.5: 120 a minute in each of the
    three full minutes, 30 in each partial edge minute. Counting the edges as whole minutes
    would say 420 / 5 = 84 a minute."""
    from django_dbqueue.spark import queue_report

    start = BASE + timedelta(minutes=10, seconds=45)
    rows = []
    for k in range(420):
        finished = start + k * timedelta(milliseconds=500)
        rows.append(
            attempt("shop.Order", k, 1, enqueued=finished - SECOND, due=finished - SECOND,
                    claimed=finished - SECOND / 2, finished=finished)
        )  # fmt: skip
    attempt_history(rows)
    report = queue_report(spark, out=tmp_path, since=BASE)
    (order,) = report.summary
    assert order["completed"] == 420
    assert (order["full_minutes"], order["rate_basis"]) == (3, "full minutes")
    assert order["completed_per_minute"] == pytest.approx(120.0)
    per_minute = [(r["minute"][11:16], r["completed"], r["partial"]) for r in _csv(report, "per_minute")]
    assert per_minute == [
        ("12:10", "30", "True"),
        ("12:11", "120", "False"),
        ("12:12", "120", "False"),
        ("12:13", "120", "False"),
        ("12:14", "30", "True"),
    ]
    markdown = report.files["report.md"].read_text()
    assert "| 120.0 | 3 full minutes |" in markdown


ERRORS = [
    *(f"AccountClosed: account {200_000 + k} closed" for k in range(1_034)),
    *("ValueError: card declined for 950.00" for _ in range(30)),
    *("ValueError: card declined for 1,234.56" for _ in range(10)),
    *("django_dbqueue.exceptions.Discard: cannot ship to country 'XX'" for _ in range(3)),
    "KeyError: 'order-3f2a9c1e-8b7d-4e6f-9a0b-1c2d3e4f5a6b'",
    "KeyError: 'order-0b7c1e2d-aaaa-4e6f-9a0b-ffffffffffff'",
    "RuntimeError: lock 0x7f3a2b1c held by worker host-2 pid 12345 token 9f86d081884c7d65",
    "smtplib.SMTPRecipientsRefused: bob@example.com refused, alice@example.org refused",
    "lease expired: the worker stopped renewing its claim (crashed, killed or hung); running it again",
]


def test_top_errors_are_grouped_by_exception_and_masked_message(spark, attempt_history, tmp_path):
    from django_dbqueue.spark import queue_report

    rows = []
    for k, message in enumerate(ERRORS):
        finished = BASE + k * timedelta(milliseconds=10)
        lost = message.startswith("lease")
        # A full traceback as the worker stores it: the last line is the exception.
        error = (
            message
            if lost
            else f'Traceback (most recent call last):\n  File "shop.py", line 7\n{message}\n\n'
        )
        rows.append(
            attempt("shop.Payment", k, 1, enqueued=BASE, due=BASE, claimed=finished, finished=finished,
                    outcome="lost" if lost else "retried", error=error)
        )  # fmt: skip
    attempt_history(rows)
    report = queue_report(spark, out=tmp_path, since=BASE)
    groups = {(e["exception"], e["message"]): e for e in report.top_errors}
    assert [(e["rank"], e["exception"], e["message"], e["count"]) for e in report.top_errors][:2] == [
        (1, "AccountClosed", "account <n> closed", 1_034),
        (2, "ValueError", "card declined for <n>", 40),
    ]
    closed = groups["AccountClosed", "account <n> closed"]
    assert closed["distinct_messages"] == 1_034
    # The most recently seen distinct raw messages, newest first.
    assert closed["samples"] == [
        f"AccountClosed: account {200_000 + k} closed" for k in (1_033, 1_032, 1_031)
    ]
    assert groups["ValueError", "card declined for <n>"]["distinct_messages"] == 2
    assert groups["django_dbqueue.exceptions.Discard", "cannot ship to country 'XX'"]["count"] == 3
    assert groups["KeyError", "'order-<id>'"]["count"] == 2
    assert groups["RuntimeError", "lock <id> held by worker host-<n> pid <n> token <id>"]["count"] == 1
    assert groups["smtplib.SMTPRecipientsRefused", "<email> refused, <email> refused"]["count"] == 1
    lease = ERRORS[-1]  # no exception class: the whole line is the message
    assert groups["", lease]["count"] == 1
    assert len(report.top_errors) == 7

    # The CSV keeps the samples as a JSON array in one cell; the Markdown shows them.
    (closed_csv,) = [r for r in _csv(report, "top_errors") if r["exception"] == "AccountClosed"]
    assert json.loads(closed_csv["samples"])[0] == "AccountClosed: account 201033 closed"
    markdown = report.files["report.md"].read_text()
    assert "| shop.Payment | 1,034 | AccountClosed | `account <n> closed` | 1,034 |" in markdown
    assert "`AccountClosed: account 201033 closed`<br>" in markdown
    assert "account 200014 closed" not in markdown

    top2 = queue_report(spark, out=tmp_path / "two", since=BASE, top_errors=2)
    assert [e["exception"] for e in top2.top_errors] == ["AccountClosed", "ValueError"]


OLD_HISTORY_DDL = """
CREATE TABLE dbq_test_old_history (
    id bigint NOT NULL AUTO_INCREMENT PRIMARY KEY,
    model varchar(100) NOT NULL,
    object_id varchar(64) NOT NULL,
    attempt integer NOT NULL,
    worker_id varchar(255) NOT NULL,
    enqueued_at datetime(6) NULL,
    claimed_at datetime(6) NULL,
    finished_at datetime(6) NOT NULL,
    outcome varchar(16) NOT NULL,
    error longtext NOT NULL
)
"""


def _bulk_retry_history() -> list[dict]:
    """Ten refunds enqueued two weeks before BASE failed for good then; an operator retried
    them all at BASE (retry_now: due now, a fresh attempt count) and they succeeded, claimed
    1..10 s after they became due."""
    enqueued = BASE - timedelta(days=14)
    rows = []
    for i in range(1, 11):
        first = enqueued + i * SECOND
        rows.append(
            attempt("shop.Refund", i, 1, enqueued=enqueued, due=enqueued, claimed=first,
                    finished=first + SECOND / 2, outcome="failed", error="ValueError: bank offline")
        )  # fmt: skip
        claimed = BASE + i * SECOND
        rows.append(
            attempt("shop.Refund", i, 1, enqueued=enqueued, due=BASE, claimed=claimed,
                    finished=claimed + SECOND / 2)
        )  # fmt: skip
    return rows


def test_wait_counts_from_the_due_time_after_a_bulk_retry(spark, attempt_history, tmp_path):
    from django_dbqueue.spark import queue_report, read_history

    rows = _bulk_retry_history()
    attempt_history(rows)
    report = queue_report(spark, out=tmp_path / "due", since=BASE - timedelta(hours=1))
    (refund,) = report.summary
    assert (refund["attempts"], refund["succeeded"], refund["wait_from_enqueued"]) == (10, 10, 0)
    # Queue delay: 1..10 s after the retry made them due, not two weeks.
    assert refund["wait_s_p50"] == pytest.approx(5.5)
    assert refund["wait_s_p95"] == pytest.approx(9.55)
    assert refund["wait_s_p99"] == pytest.approx(9.91)
    # End to end keeps the two weeks since the enqueue (plus the claim delay and the run).
    two_weeks = 14 * 86_400
    assert refund["e2e_s_p50"] == pytest.approx(two_weeks + 6.0)
    assert refund["e2e_s_p99"] == pytest.approx(two_weeks + 10.41)
    markdown = report.files["report.md"].read_text()
    assert "| shop.Refund | 5.500 | 9.550 | 9.910 |" in markdown
    assert "| 1,209,606.000 |" in markdown and "no recorded due time" not in markdown

    # History written before due_at was recorded: read as NULL, the wait counts from the
    # enqueue, and the report says how many attempts that concerns.
    with connection.cursor() as cursor:
        cursor.execute(OLD_HISTORY_DDL)
        try:
            columns = ("model", "object_id", "attempt", "worker_id", "enqueued_at", "claimed_at",
                       "finished_at", "outcome", "error")  # fmt: skip
            cursor.executemany(
                f"INSERT INTO dbq_test_old_history ({', '.join(columns)}) VALUES ({', '.join(['%s'] * 9)})",
                [[connection.ops.adapt_datetimefield_value(r[c]) if c.endswith("_at") else r[c]
                  for c in columns] for r in rows],
            )  # fmt: skip
            old = read_history(spark, table="dbq_test_old_history", since=BASE - timedelta(hours=1))
            assert old.where("due_at IS NULL").count() == 10
            report = queue_report(spark, out=tmp_path / "old", history=old)
        finally:
            cursor.execute("DROP TABLE dbq_test_old_history")
    (refund,) = report.summary
    assert refund["wait_from_enqueued"] == 10
    assert refund["wait_s_p50"] == pytest.approx(two_weeks + 5.5)
    assert "shop.Refund: 10 attempts have no recorded due time" in report.files["report.md"].read_text()


def test_read_history_bounds_run_in_the_database(spark, attempt_history, tmp_path, capsys):
    from django_dbqueue.spark import queue_report, read_history

    attempt_history(_known_history())
    # shop.Order i finished 1.1 * i s after BASE: since includes i = 10, until excludes i = 20.
    df = read_history(spark, models=["shop.Order"], since=BASE + 11 * SECOND, until=BASE + 22 * SECOND)
    assert sorted(int(r.object_id) for r in df.collect()) == list(range(10, 20))
    df.explain(mode="formatted")
    pushed = next(line for line in capsys.readouterr().out.splitlines() if "PushedFilters" in line)
    assert "GreaterThanOrEqual(finished_at" in pushed and "LessThan(finished_at" in pushed
    assert "model" in pushed
    assert (
        read_history(spark, models=["mail.Email"], until=BASE + timedelta(minutes=3, seconds=5)).count() == 5
    )
    with pytest.raises(ValueError, match="not model labels"):
        read_history(spark, models=["shop.Order' OR '1'='1"])
    with pytest.raises(ValueError, match="timezone-aware"):
        read_history(spark, since=datetime(2026, 1, 5))

    report = queue_report(spark, out=tmp_path, models=["shop.Order"])
    assert [s["model"] for s in report.summary] == ["shop.Order"]
    assert report.summary[0]["attempts"] == 101  # with the old failure: no since=


def test_commands_enqueue_from_files_and_report(spark, attempt_history, tmp_path):
    attempt_history(_known_history())
    parquet = tmp_path / "accounts.parquet"
    spark.range(1, 1_001).selectExpr(
        "id AS account_id", "CONCAT('user', id, '@example.com') AS email"
    ).write.parquet(str(parquet))
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
        "queue_spark_enqueue", "sparkapp.AccountSync", "--csv", str(csv_path),
        "--columns", "acct:account_id,mail:email", "--delay", "60", stdout=out,
    )  # fmt: skip
    assert "1 inserted, 1 already queued (of 2 rows)" in out.getvalue()
    assert AccountSync.objects.get(account_id=1001).email == "b@example.com"
    assert AccountSync.objects.filter(queue_priority=7).count() == 1_000

    out = io.StringIO()
    call_command(
        "queue_spark_enqueue", "sparkapp.Delivery", "--table", "sparkapp_accountsync",
        "--columns", "email:recipient,email:subject,queue_state:campaign", stdout=out,
    )  # fmt: skip
    assert "1001 inserted" in out.getvalue()

    out = io.StringIO()
    call_command("queuereport", "--since", "2026-01-05T11:00", "--out", str(tmp_path / "r"), stdout=out)
    assert "shop.Order: 100 attempts, 100 jobs, failure rate 10.0 %" in out.getvalue()
    assert "52.3 completed/min (over a 108.9 s window)" in out.getvalue()
    assert "wait p95 95.050s, run p95 9.505s, end-to-end p95 99.330s" in out.getvalue()
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
            "queue_spark_enqueue", "sparkapp.AccountSync", "--table", "sparkapp_accountsync",
            "--columns", "email", "--key", "email",
        )  # fmt: skip
    with override_settings(DBQUEUE_SPARK_JDBC_JAR=str(tmp_path / "missing.jar")):
        with pytest.raises(CommandError, match="MariaDB JDBC driver not found"):
            call_command("queuereport", "--out", str(tmp_path / "r"))
    with pytest.raises(CommandError, match="Unknown database alias"):
        call_command("queuereport", "--database", "nope")


def test_report_counts_cancelled_attempts(spark, attempt_history, tmp_path):
    """A cancelled attempt is an outcome the queue writes (AttemptOutcome.CANCELLED): the report
    has its column and counts it (it counted a "released" outcome that is never written)."""
    from django_dbqueue.spark import queue_report

    rows = [
        attempt("shop.Order", k, 1, enqueued=BASE, due=BASE, claimed=BASE + SECOND,
                finished=BASE + 2 * SECOND, outcome="cancelled" if k < 3 else "succeeded",
                error="cancelled by ops" if k < 3 else "")
        for k in range(10)
    ]  # fmt: skip
    attempt_history(rows)
    report = queue_report(spark, out=tmp_path, since=BASE - SECOND)
    (order,) = report.summary
    assert (order["cancelled"], order["succeeded"], order["attempts"]) == (3, 7, 10)
    assert "released" not in order
    assert "| cancelled |" in report.files["report.md"].read_text()
