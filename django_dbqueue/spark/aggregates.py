"""The report's aggregates over the attempt history, per model and per minute.

Definitions (all durations in seconds, from microseconds):

* wait = ``claimed_at`` minus the moment the attempt became due: the later of ``due_at``
  (``queue_run_at`` when the row was claimed) and ``enqueued_at``. Backoff, scheduling and an
  operator's retry of old rows are not queue delay. History without ``due_at`` waits from
  ``enqueued_at``; ``wait_from_enqueued`` counts those attempts.
* run = ``finished_at - claimed_at``.
* end-to-end = ``finished_at - enqueued_at`` of the attempts that ended their job (succeeded or
  failed for good): everything the job went through, retries and backoff included.
* completed per minute = succeeded + failed over the full minutes strictly between a model's
  first and last finishing minute (those two are partial); with no full minute, over the real
  window from the first to the last finish. ``rate_basis`` says which.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..states import AttemptOutcome
from .read import HISTORY_COLUMNS, OPTIONAL_HISTORY_COLUMNS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: One count column per attempt outcome, from the one vocabulary (states.py): a new outcome
#: gets its column without this list drifting from what the queue writes.
OUTCOMES = tuple(str(outcome) for outcome in AttemptOutcome)
PERCENTILES = (0.5, 0.95, 0.99)
DURATIONS = ("wait_s", "run_s", "e2e_s")
#: Outcomes that end a job (the others are followed by another attempt).
JOB_ENDS = (str(AttemptOutcome.SUCCEEDED), str(AttemptOutcome.FAILED))


def _seconds(sf: Any, end: str, start: str | Column) -> Column:
    return (sf.unix_micros(end) - sf.unix_micros(start)) / 1e6


def timed(history: DataFrame) -> DataFrame:
    """The history's finished attempts with ``wait_s``, ``run_s``, ``e2e_s`` and ``minute``."""
    from pyspark.sql import functions as sf

    for name, spark_type in OPTIONAL_HISTORY_COLUMNS.items():
        if name not in history.columns:
            history = history.withColumn(name, sf.lit(None).cast(spark_type))
    # greatest() skips NULLs: without due_at the attempt waits from its enqueue.
    due = sf.greatest("due_at", "enqueued_at")
    return (
        history.select(*HISTORY_COLUMNS)
        .where(sf.col("finished_at").isNotNull())
        .withColumn("wait_s", _seconds(sf, "claimed_at", due))
        .withColumn("run_s", _seconds(sf, "finished_at", "claimed_at"))
        .withColumn(
            "e2e_s", sf.when(sf.col("outcome").isin(*JOB_ENDS), _seconds(sf, "finished_at", "enqueued_at"))
        )
        .withColumn("minute", sf.date_trunc("minute", "finished_at"))
    )


def _split_percentiles(df: DataFrame, prefixes: Iterable[str] = DURATIONS) -> DataFrame:
    from pyspark.sql import functions as sf

    for prefix in prefixes:
        for i, p in enumerate(PERCENTILES):
            # Durations come from microseconds: more digits are interpolation noise.
            df = df.withColumn(f"{prefix}_p{round(p * 100)}", sf.round(sf.col(f"{prefix}_pct")[i], 6))
        df = df.drop(f"{prefix}_pct")
    return df


def _aggregates(sf: Any) -> list[Any]:
    counts = [sf.sum((sf.col("outcome") == o).cast("long")).alias(o) for o in OUTCOMES]
    # Exact percentiles with linear interpolation; NULLs (e2e of non-final attempts) skipped.
    percentiles = [sf.percentile(d, list(PERCENTILES)).alias(f"{d}_pct") for d in DURATIONS]
    return [
        sf.count(sf.lit(1)).alias("attempts"),
        *counts,
        sf.sum(sf.col("due_at").isNull().cast("long")).alias("wait_from_enqueued"),
        *percentiles,
    ]


def _completed(sf: Any) -> Column:
    return sf.col("succeeded") + sf.col("failed")


def per_period(h: DataFrame, start: Column) -> DataFrame:
    """Aggregates per model and period (``start``, named ``minute``); the first and last period
    of each model are ``partial``: its work began and ended somewhere inside them."""
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    edges = Window.partitionBy("model")
    df = _split_percentiles(h.groupBy("model", start.alias("minute")).agg(*_aggregates(sf)))
    minute = sf.col("minute")
    partial = (minute == sf.min(minute).over(edges)) | (minute == sf.max(minute).over(edges))
    return (
        df.withColumn("completed", _completed(sf)).withColumn("partial", partial).orderBy("model", "minute")
    )


def summarise(h: DataFrame, per_minute: DataFrame) -> DataFrame:
    """One row per model: outcomes, jobs, percentiles, failure rates and the completion rate."""
    from pyspark.sql import functions as sf

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
    full = (
        per_minute.where(~sf.col("partial"))
        .groupBy("model")
        .agg(sf.sum("completed").alias("full_minute_completed"))
    )
    summary = (
        _split_percentiles(
            h.groupBy("model").agg(
                *_aggregates(sf),
                sf.min("finished_at").alias("first_finished"),
                sf.max("finished_at").alias("last_finished"),
            )
        )
        .join(jobs, "model")
        .join(full, "model", "left")
    )
    completed = _completed(sf)
    # Every attempt row is a run of the handler (a row given back writes none); a cancelled one
    # counts in the denominator, not as a failure.
    counted = sf.col("attempts")
    span = sf.unix_seconds(sf.date_trunc("minute", "last_finished")) - sf.unix_seconds(
        sf.date_trunc("minute", "first_finished")
    )
    full_minutes = sf.greatest(span / 60 - 1, sf.lit(0)).cast("long")
    window_s = _seconds(sf, "last_finished", "first_finished")
    has_full = sf.col("full_minutes") >= 1
    return (
        summary.withColumn("completed", completed)
        .withColumn("full_minutes", full_minutes)
        .withColumn("window_s", window_s)
        .withColumn(
            "completed_per_minute",
            sf.when(has_full, sf.coalesce("full_minute_completed", sf.lit(0)) / sf.col("full_minutes")).when(
                sf.col("window_s") > 0, completed / sf.col("window_s") * 60
            ),
        )
        .withColumn(
            "rate_basis",
            sf.when(has_full, sf.lit("full minutes")).when(sf.col("window_s") > 0, sf.lit("window")),
        )
        .drop("full_minute_completed")
        .withColumn(
            "attempt_failure_rate",
            sf.when(counted > 0, (sf.col("failed") + sf.col("retried") + sf.col("lost")) / counted),
        )
        .withColumn("job_failure_rate", sf.when(completed > 0, sf.col("failed") / completed))
        .orderBy("model")
    )


def attempts_by_number(h: DataFrame) -> DataFrame:
    """Per model and attempt number: how many attempts, by outcome (the retry counts)."""
    from pyspark.sql import functions as sf

    return (
        h.groupBy("model", "attempt")
        .agg(
            sf.count(sf.lit(1)).alias("attempts"),
            *[sf.sum((sf.col("outcome") == o).cast("long")).alias(o) for o in OUTCOMES],
        )
        .orderBy("model", "attempt")
    )
