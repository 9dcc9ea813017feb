"""The queue-history report: :func:`queue_report` reads the attempt history, aggregates it
(:mod:`.aggregates`, :mod:`.errors`) and writes it (:mod:`.render`)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .aggregates import attempts_by_number, per_period, summarise, timed
from .charts import chart_bucket, charts
from .errors import top_errors as error_groups
from .read import read_history
from .render import collect_utc, markdown, write_csv
from .session import Progress, check_utc

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

logger = logging.getLogger("django_dbqueue.spark")


@dataclass
class QueueReport:
    out: Path
    files: dict[str, Path]
    summary: list[dict[str, Any]]
    top_errors: list[dict[str, Any]]
    seconds: float


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

    Per model (``summary``) and per model and minute of ``finished_at`` (``per_minute``, its
    first and last minute marked ``partial``): attempts and outcomes, completed jobs
    (succeeded + failed for good), wait, run and end-to-end p50/p95/p99 in seconds (exact
    percentiles, linear interpolation; defined in :mod:`.aggregates`); per model the failure
    rates and completed jobs per minute over full minutes; the top error groups by exception
    class and masked message with raw samples (``top_errors``); how many attempts each
    attempt number had (``attempts``: retry counts).

    Written as ``parquet/<name>/`` and ``<name>.csv`` for each table, ``throughput.png`` and
    ``latency.png``, and ``report.md``. ``history`` replaces :func:`read_history` (any
    DataFrame with its columns)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as sf

    say = progress or (lambda message: logger.info("%s", message))
    started = time.monotonic()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if history is None:
        history = read_history(spark, since=since, until=until, models=models, using=using)
    else:
        check_utc(spark)
    h = timed(history).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        say("reading history and aggregating")
        per_minute = per_period(h, sf.col("minute")).persist(StorageLevel.MEMORY_AND_DISK)
        tables = {
            "summary": summarise(h, per_minute),
            "per_minute": per_minute,
            "top_errors": error_groups(h, top_errors),
            "attempts": attempts_by_number(h),
        }
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
        per_minute.unpersist()
        # Charts keep a readable number of points: a week of minutes is drawn in 30-minute
        # buckets (exact percentiles per bucket, throughput averaged per minute).
        bucket = chart_bucket(collected["summary"])
        chart_rows = collected["per_minute"]
        if bucket > 1:
            say(f"aggregating {bucket}-minute buckets for the charts")
            seconds = bucket * 60
            start = sf.timestamp_seconds(sf.floor(sf.unix_seconds("finished_at") / seconds) * seconds)
            chart_rows = collect_utc(per_period(h, start))
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
