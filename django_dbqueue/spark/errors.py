"""Top errors of the report, grouped: by exception class and by the message with its
variable parts (numbers, amounts, ids, e-mail addresses) masked, with samples of the raw
messages. "account 200014 closed" and its thousand siblings are one group, not a thousand
rows of one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..states import AttemptOutcome
from ..tracebacks import ERROR_LINE_LENGTH, ERROR_MASKS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: The exception class at the start of a traceback's last line: a CapWords name, possibly
#: module-qualified (``requests.exceptions.HTTPError``), then ``:`` and the message, or the end.
EXCEPTION_LINE = r"^((?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Z][A-Za-z0-9_]*)(?::\s*(.*))?$"
#: Masks applied in this order (Java regular expressions): the ones the admin's dead-letter
#: console groups by too.
MASKS = ERROR_MASKS
#: Raw messages kept per group (the most recently seen distinct ones).
SAMPLES = 3
#: Characters of the last line kept as the message (a traceback line can be a whole payload).
MESSAGE_LENGTH = ERROR_LINE_LENGTH
ERROR_OUTCOMES = (str(AttemptOutcome.FAILED), str(AttemptOutcome.RETRIED), str(AttemptOutcome.LOST))


def last_line(sf: Any, error: str = "error") -> Column:
    """The last non-blank line of the stored traceback: the exception and its message."""
    stripped = sf.regexp_replace(sf.col(error), r"^\s+|\s+$", "")  # trim() strips spaces only
    return sf.substring(sf.trim(sf.element_at(sf.split(stripped, "\n"), -1)), 1, MESSAGE_LENGTH)


def masked(sf: Any, text: Column) -> Column:
    for pattern, replacement in MASKS:
        text = sf.regexp_replace(text, pattern, replacement)
    return text


def classified(history: DataFrame) -> DataFrame:
    """The failed, retried and lost attempts that kept an error, as ``model, exception,
    message`` (masked), ``raw`` (the last line) and ``finished_at``. A last line that does
    not start with an exception class (e.g. the rescue's "lease expired: …") has exception ""
    and is its own message."""
    from pyspark.sql import functions as sf

    raw = last_line(sf)
    exception = sf.regexp_extract(raw, EXCEPTION_LINE, 1)
    text = sf.when(exception != "", sf.regexp_extract(raw, EXCEPTION_LINE, 2)).otherwise(raw)
    return (
        history.where(sf.col("outcome").isin(*ERROR_OUTCOMES))
        .select(
            "model",
            exception.alias("exception"),
            masked(sf, text).alias("message"),
            raw.alias("raw"),
            "finished_at",
        )
        .where(sf.col("raw") != "")
    )


def top_errors(history: DataFrame, top: int) -> DataFrame:
    """Per model, the ``top`` largest error groups: ``rank, model, exception, message, count,
    distinct_messages, last_seen, samples`` (up to :data:`SAMPLES` raw messages, newest first)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    group = ["model", "exception", "message"]
    per_raw = (
        classified(history)
        .groupBy(*group, "raw")
        .agg(sf.count(sf.lit(1)).alias("n"), sf.max("finished_at").alias("seen"))
    )
    newest = sf.row_number().over(Window.partitionBy(*group).orderBy(sf.desc("seen"), "raw"))
    sample = sf.when(sf.col("newest") <= SAMPLES, sf.struct(sf.col("newest"), sf.col("raw")))
    groups = (
        per_raw.withColumn("newest", newest)
        .groupBy(*group)
        .agg(
            sf.sum("n").alias("count"),
            sf.count(sf.lit(1)).alias("distinct_messages"),
            sf.max("seen").alias("last_seen"),
            # collect_list skips the NULLs of rows past SAMPLES; sorted by recency.
            sf.transform(sf.sort_array(sf.collect_list(sample)), lambda s: s["raw"]).alias("samples"),
        )
    )
    rank = sf.row_number().over(Window.partitionBy("model").orderBy(sf.desc("count"), "exception", "message"))
    return (
        groups.withColumn("rank", rank)
        .where(sf.col("rank") <= top)
        .select("model", "rank", "exception", "message", "count", "distinct_messages", "last_seen", "samples")
        .orderBy("model", "rank")
    )
