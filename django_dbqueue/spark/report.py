"""The queue-history report: throughput, wait/run percentiles, failure rates, top errors and
retry counts per model and per minute, aggregated by Spark and written by :mod:`.render`."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .read import HISTORY_COLUMNS, read_history
from .render import chart_bucket, charts, collect_utc, markdown, write_csv
from .session import Progress, check_utc

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

logger = logging.getLogger("django_dbqueue.spark")

OUTCOMES = ("succeeded", "failed", "retried", "lost", "released")
PERCENTILES = (0.5, 0.95, 0.99)


@dataclass
class QueueReport:
    out: Path
    files: dict[str, Path]
    summary: list[dict[str, Any]]
    top_errors: list[dict[str, Any]]
    seconds: float


def _percentile_columns(sf: Any, prefix: str, column: str) -> list[Any]:
    pct = sf.percentile(column, list(PERCENTILES))
    return [pct.alias(f"{prefix}_pct")]


def _split_percentiles(df: DataFrame, prefixes: Iterable[str]) -> DataFrame:
    from pyspark.sql import functions as sf

    for prefix in prefixes:
        for i, p in enumerate(PERCENTILES):
            # Durations come from microseconds: more digits are interpolation noise.
            df = df.withColumn(f"{prefix}_p{round(p * 100)}", sf.round(sf.col(f"{prefix}_pct")[i], 6))
        df = df.drop(f"{prefix}_pct")
    return df


def _aggregates(sf: Any) -> list[Any]:
    counts = [sf.sum((sf.col("outcome") == o).cast("long")).alias(o) for o in OUTCOMES]
    return [
        sf.count(sf.lit(1)).alias("attempts"),
        *counts,
        *_percentile_columns(sf, "wait_s", "wait_s"),
        *_percentile_columns(sf, "run_s", "run_s"),
    ]


def queue_report(
    spark: SparkSession,
    *,
    out: str | os.PathLike[str],
    since: datetime | None = None,
    until: datetime | None = None,
    models: Sequence[str] | None = None,
    using: str = "default",
    history: DataFrame | None = None,
    top_errors: int = 10,
    progress: Progress | None = None,
) -> QueueReport:
    """Analyse the attempt history and write the report into the directory ``out``.

    Per model (``summary``) and per model and minute of ``finished_at`` (``per_minute``):
    attempts and outcomes, completed jobs (succeeded + failed for good), wait time
    (``claimed_at - enqueued_at``) and run time (``finished_at - claimed_at``) p50/p95/p99 in
    seconds (exact percentiles, linear interpolation); per model the failure rates,
    the top error messages (last line of the stored traceback) and how many attempts each
    attempt number had (``attempts``: retry counts).

    Written as ``parquet/<name>/`` and ``<name>.csv`` for each table, ``throughput.png`` and
    ``latency.png``, and ``report.md``. ``history`` replaces :func:`read_history` (any
    DataFrame with its columns)."""
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    say = progress or (lambda message: logger.info("%s", message))
    started = time.monotonic()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if history is None:
        history = read_history(spark, since=since, until=until, models=models, using=using)
    else:
        check_utc(spark)
    h = (
        history.select(*HISTORY_COLUMNS)
        .where(sf.col("finished_at").isNotNull())
        .withColumn("wait_s", (sf.unix_micros("claimed_at") - sf.unix_micros("enqueued_at")) / 1e6)
        .withColumn("run_s", (sf.unix_micros("finished_at") - sf.unix_micros("claimed_at")) / 1e6)
        .withColumn("minute", sf.date_trunc("minute", "finished_at"))
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    try:
        say("reading history and aggregating")
        completed = sf.col("succeeded") + sf.col("failed")
        per_minute = _split_percentiles(
            h.groupBy("model", "minute").agg(*_aggregates(sf)).withColumn("completed", completed),
            ["wait_s", "run_s"],
        ).orderBy("model", "minute")
        counted = sf.col("attempts") - sf.col("released")
        # Jobs per model from a per-job aggregate: countDistinct next to the percentiles would
        # make Spark expand every row once per distinct aggregate (several times slower).
        jobs = (
            h.groupBy("model", "object_id")
            .agg(sf.max("attempt").alias("job_attempts"))
            .groupBy("model")
            .agg(
                sf.count(sf.lit(1)).alias("jobs"),
                sf.sum((sf.col("job_attempts") > 1).cast("long")).alias("retried_jobs"),
                sf.max("job_attempts").alias("max_attempt"),
            )
        )
        summary = _split_percentiles(
            h.groupBy("model").agg(
                *_aggregates(sf),
                sf.min("finished_at").alias("first_finished"),
                sf.max("finished_at").alias("last_finished"),
            ),
            ["wait_s", "run_s"],
        ).join(jobs, "model")
        span = sf.unix_seconds(sf.date_trunc("minute", "last_finished")) - sf.unix_seconds(
            sf.date_trunc("minute", "first_finished")
        )
        minutes = span / 60 + 1
        summary = (
            summary.withColumn("completed", completed)
            .withColumn("minutes", minutes.cast("long"))
            .withColumn("completed_per_minute", sf.col("completed") / sf.col("minutes"))
            .withColumn(
                "attempt_failure_rate",
                sf.when(counted > 0, (sf.col("failed") + sf.col("retried") + sf.col("lost")) / counted),
            )
            .withColumn("job_failure_rate", sf.when(completed > 0, sf.col("failed") / completed))
            .orderBy("model")
        )
        # The message is the last non-blank line of the stored traceback (trim() strips spaces only).
        stripped = sf.regexp_replace(sf.col("error"), r"^\s+|\s+$", "")
        message = sf.substring(sf.trim(sf.element_at(sf.split(stripped, "\n"), -1)), 1, 300)
        errors = (
            h.where(sf.col("outcome").isin("failed", "retried", "lost") & (stripped != ""))
            .groupBy("model", message.alias("message"))
            .agg(sf.count(sf.lit(1)).alias("count"), sf.max("finished_at").alias("last_seen"))
        )
        rank = sf.row_number().over(Window.partitionBy("model").orderBy(sf.desc("count"), "message"))
        errors = errors.withColumn("rank", rank).where(sf.col("rank") <= top_errors).orderBy("model", "rank")
        attempts = (
            h.groupBy("model", "attempt")
            .agg(
                sf.count(sf.lit(1)).alias("attempts"),
                *[sf.sum((sf.col("outcome") == o).cast("long")).alias(o) for o in OUTCOMES],
            )
            .orderBy("model", "attempt")
        )

        tables = {"summary": summary, "per_minute": per_minute, "top_errors": errors, "attempts": attempts}
        files: dict[str, Path] = {}
        collected: dict[str, list[dict[str, Any]]] = {}
        for name, df in tables.items():
            say(f"writing {name}")
            path = out / "parquet" / name
            table = df.persist(StorageLevel.MEMORY_AND_DISK)  # small: computed once, written twice
            try:
                table.write.mode("overwrite").parquet(str(path))  # local files: overwrite is fine
                files[f"{name}.parquet"] = path
                collected[name] = collect_utc(table)
                files[f"{name}.csv"] = write_csv(out / f"{name}.csv", collected[name], table.columns)
            finally:
                table.unpersist()
        # Charts keep a readable number of points: a week of minutes is drawn in 30-minute
        # buckets (exact percentiles per bucket, throughput averaged per minute).
        bucket = chart_bucket(collected["summary"])
        chart_rows = collected["per_minute"]
        if bucket > 1:
            say(f"aggregating {bucket}-minute buckets for the charts")
            seconds = bucket * 60
            start = sf.timestamp_seconds(sf.floor(sf.unix_seconds("finished_at") / seconds) * seconds)
            chart_rows = collect_utc(
                _split_percentiles(
                    h.groupBy("model", start.alias("bucket_start"))
                    .agg(*_aggregates(sf))
                    .withColumn("completed", completed)
                    .withColumnRenamed("bucket_start", "minute"),
                    ["wait_s", "run_s"],
                ).orderBy("model", "minute")
            )
        files["throughput.png"], files["latency.png"] = charts(out, chart_rows, bucket)
        report = QueueReport(
            out=out,
            files=files,
            summary=collected["summary"],
            top_errors=collected["top_errors"],
            seconds=time.monotonic() - started,
        )
        files["report.md"] = markdown(out / "report.md", report, since, until)
    finally:
        h.unpersist()
    say(f"report written to {out} in {report.seconds:.1f}s")
    return report
