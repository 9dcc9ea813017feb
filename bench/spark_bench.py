"""Spark pipeline benchmark: bulk enqueue of N rows (default 1,000,000) into a queue model
through Spark (staging + chunked anti-join INSERT IGNORE), the ORM's ``bulk_create`` and plain
``executemany``, each fresh and re-run (all rows already there); then ``queue_report`` over
N attempt-history rows. One run each; prints a Markdown section and writes it to --out.

    make bench-spark                      # DATABASE_URL=mysql://root@127.0.0.1:3306/spark_bench
    DATABASE_URL=mysql://root@127.0.0.1:3306/spark_bench python bench/spark_bench.py --rows 100000

The database is created if missing, migrated, and its queue/history tables are emptied.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlparse

UTC = timezone.utc  # datetime.UTC is Python 3.11+


ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
os.environ.setdefault("DATABASE_URL", "mysql://root@127.0.0.1:3306/spark_bench")

CHUNK = 5_000
HISTORY_DDL = """
CREATE TABLE IF NOT EXISTS {table} (
    id bigint NOT NULL AUTO_INCREMENT PRIMARY KEY,
    model varchar(100) NOT NULL,
    object_id varchar(64) NOT NULL,
    attempt integer NOT NULL,
    worker_id varchar(255) NOT NULL,
    enqueued_at datetime(6) NOT NULL,
    due_at datetime(6) NULL,
    claimed_at datetime(6) NOT NULL,
    finished_at datetime(6) NULL,
    outcome varchar(16) NOT NULL,
    error longtext NOT NULL
)
"""
# N attempts, one every 0.6 s (a week per million), three models; waits skewed towards zero
# (up to ~40 s, slower in the afternoons), runs up to 2 s; 2 % fail for good, ~14 % are
# retried, 0.1 % lost; five distinct error messages (one group once numbers are masked).
# RAND(seq) is seeded per row: repeatable.
HISTORY_FILL = """
INSERT INTO {table}
    (model, object_id, attempt, worker_id, enqueued_at, due_at, claimed_at, finished_at, outcome, error)
SELECT model, seq, 1 + (seq % 7 = 0), CONCAT('bench-host:', seq % 4), enq, enq,
       enq + INTERVAL wait_us MICROSECOND, enq + INTERVAL (wait_us + run_us) MICROSECOND, outcome,
       IF(outcome = 'succeeded', '',
          CONCAT('Traceback (most recent call last):\\n  File "app.py", line ', seq % 100,
                 '\\nValueError: bad input ', seq % 5, '\\n'))
FROM (
    SELECT seq, ELT(1 + seq % 3, 'shop.Order', 'mail.Email', 'sync.Account') AS model,
           TIMESTAMP('2026-11-01 00:00:00') + INTERVAL seq * 600000 MICROSECOND AS enq,
           FLOOR(POW(RAND(seq), 3) * 20000000 * (1 + SIN(seq * 0.6 / 86400 * 2 * PI()))) AS wait_us,
           FLOOR(POW(RAND(seq + 1), 2) * 2000000) AS run_us,
           CASE WHEN seq % 50 = 0 THEN 'failed' WHEN seq % 7 = 0 THEN 'retried'
                WHEN seq % 997 = 0 THEN 'lost' ELSE 'succeeded' END AS outcome
    FROM seq_1_to_{rows}
) s
"""


def ensure_database() -> None:
    import MySQLdb

    url = urlparse(os.environ["DATABASE_URL"])
    name = url.path.lstrip("/")
    conn = MySQLdb.connect(
        host=url.hostname or "127.0.0.1",
        port=url.port or 3306,
        user=url.username or "root",
        passwd=url.password or "",
    )
    conn.cursor().execute(f"CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4")
    conn.close()


def timed(what: str, fn: Callable[[], object]) -> tuple[float, object]:
    print(f"  {what} ...", end="", flush=True)
    t0 = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - t0
    print(f" {seconds:.1f}s", flush=True)
    return seconds, result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--out", default=str(ROOT / "bench" / "out" / "spark"))
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    rows = args.rows
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    ensure_database()
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from django_dbqueue import spark as pipeline
    from tests.sparkapp.models import AccountSync

    call_command("migrate", verbosity=0)
    table = AccountSync._meta.db_table
    qn = connection.ops.quote_name

    def truncate() -> None:
        with connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE TABLE {qn(table)}")

    def count() -> int:
        return AccountSync.objects.count()

    results: dict[str, dict[str, float]] = {}

    def record(name: str, seconds: float, inserted: int, **extra: float) -> None:
        results[name] = {"seconds": seconds, "rows_per_s": rows / seconds, "inserted": inserted, **extra}

    print(f"spark_bench: {rows:,} rows into {table} on {connection.settings_dict['NAME']}")
    start_s, spark = timed(
        "SparkSession start",
        lambda: pipeline.spark_session(args.master, driver_memory="2g", log_level="ERROR"),
    )
    from pyspark.sql import functions as sf

    source = (
        spark.range(1, rows + 1, numPartitions=2)
        .select(
            sf.col("id").alias("account_id"),
            sf.concat(sf.lit("user"), sf.col("id"), sf.lit("@example.com")).alias("email"),
        )
        .cache()
    )
    source.count()

    # -- Spark: staging + chunked anti-join INSERT IGNORE -------------------------------------
    truncate()
    seconds, res = timed(
        "Spark enqueue_dataframe, fresh", lambda: pipeline.enqueue_dataframe(source, AccountSync)
    )
    assert res.inserted == rows and count() == rows, res
    record("spark_fresh", seconds, res.inserted, stage_s=res.stage_seconds, insert_s=res.insert_seconds)
    seconds, res = timed(
        "Spark enqueue_dataframe, re-run", lambda: pipeline.enqueue_dataframe(source, AccountSync)
    )
    assert res.inserted == 0 and res.skipped == rows, res
    record("spark_rerun", seconds, res.inserted, stage_s=res.stage_seconds, insert_s=res.insert_seconds)

    # -- ORM bulk_create(ignore_conflicts=True): INSERT IGNORE, idempotent too -------------------
    def orm() -> int:
        before = count()
        for lo in range(1, rows + 1, CHUNK):
            AccountSync.objects.bulk_create(
                [
                    AccountSync(account_id=i, email=f"user{i}@example.com")
                    for i in range(lo, min(lo + CHUNK, rows + 1))
                ],
                ignore_conflicts=True,
            )
        return count() - before

    truncate()
    seconds, inserted = timed("ORM bulk_create, fresh", orm)
    record("orm_fresh", seconds, inserted)
    seconds, inserted = timed("ORM bulk_create, re-run", orm)
    record("orm_rerun", seconds, inserted)

    # -- plain executemany INSERT IGNORE (mysqlclient rewrites it into multi-row INSERTs) ------
    columns = [
        "account_id",
        "email",
        "seen_at",
        "handled",
        "queue_state",
        "queue_priority",
        "queue_run_at",
        "queue_attempts",
        "queue_last_error",
        "queue_enqueued_at",
    ]
    sql = (
        f"INSERT IGNORE INTO {qn(table)} ({', '.join(qn(c) for c in columns)}) "
        f"VALUES ({', '.join(['%s'] * len(columns))})"
    )

    def executemany() -> int:
        now = timezone.now().replace(tzinfo=None)
        inserted = 0
        with connection.cursor() as cursor:
            for lo in range(1, rows + 1, CHUNK):
                batch = [
                    (i, f"user{i}@example.com", None, 0, "ready", 0, now, 0, "", now)
                    for i in range(lo, min(lo + CHUNK, rows + 1))
                ]
                cursor.executemany(sql, batch)
                inserted += cursor.rowcount
        return inserted

    truncate()
    seconds, inserted = timed("executemany INSERT IGNORE, fresh", executemany)
    record("executemany_fresh", seconds, inserted)
    seconds, inserted = timed("executemany INSERT IGNORE, re-run", executemany)
    record("executemany_rerun", seconds, inserted)
    truncate()
    source.unpersist()

    # -- report over N history rows -----------------------------------------------------------------
    history = pipeline.history_table()
    with connection.cursor() as cursor:
        cursor.execute(HISTORY_DDL.format(table=qn(history)))
        cursor.execute(f"TRUNCATE TABLE {qn(history)}")
        fill_s, _ = timed(
            f"fill {history} with {rows:,} rows (SQL)",
            lambda: cursor.execute(HISTORY_FILL.format(table=qn(history), rows=rows)),
        )
    report_dir = out / "report"
    report_s, report = timed(
        "queue_report (JDBC read + aggregate + Parquet/CSV/PNG/Markdown)",
        lambda: pipeline.queue_report(spark, out=report_dir),
    )
    results["report"] = {
        "seconds": report_s,
        "rows_per_s": rows / report_s,
        "history_rows": rows,
        "per_minute_rows": sum(1 for _ in open(report.files["per_minute.csv"])) - 1,
    }
    spark.stop()

    load = os.getloadavg()
    lines = [
        f"### Spark pipeline, {rows:,} rows ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC)",
        "",
        f"{os.cpu_count()} cores, Python {platform.python_version()}, pyspark {spark.version}, "
        f"master {args.master}, MariaDB {connection.mysql_server_info}; one run each; "
        f"load average at the end {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f} (the machine is shared). "
        f"SparkSession start {start_s:.1f}s, not included below.",
        "",
        "| path | fresh s | fresh rows/s | re-run s (all duplicates) | re-run rows/s |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, label in (
        ("spark", "Spark `enqueue_dataframe` (staging + anti-join INSERT IGNORE)"),
        ("orm", "ORM `bulk_create(ignore_conflicts=True)`, 5,000/batch"),
        ("executemany", "mysqlclient `executemany` INSERT IGNORE, 5,000/batch"),
    ):
        fresh, rerun = results[f"{name}_fresh"], results[f"{name}_rerun"]
        lines.append(
            f"| {label} | {fresh['seconds']:.1f} | {fresh['rows_per_s']:,.0f} | "
            f"{rerun['seconds']:.1f} | {rerun['rows_per_s']:,.0f} |"
        )
    sf_, sr = results["spark_fresh"], results["spark_rerun"]
    lines += [
        "",
        f"Spark split: fresh {sf_['stage_s']:.1f}s JDBC to staging + {sf_['insert_s']:.1f}s INSERT…SELECT; "
        f"re-run {sr['stage_s']:.1f}s + {sr['insert_s']:.1f}s.",
        "",
        f"`queue_report` over {rows:,} history rows (3 models, {results['report']['per_minute_rows']:,} "
        f"model-minutes): **{report_s:.1f}s** end to end (JDBC read, exact percentiles, Parquet + CSV + "
        f"2 PNG + Markdown). Filling the history table by SQL took {fill_s:.1f}s.",
        "",
    ]
    text = "\n".join(lines)
    print()
    print(text)
    (out / "RESULTS.md").write_text(text)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    print(f"written to {out}/RESULTS.md; charts in {report_dir}")


if __name__ == "__main__":
    main()
