"""The Spark (PySpark) pipeline: bulk enqueue from DataFrames, and queue-history analytics.

Optional (``pip install 'django-dbqueue[spark]'``) and isolated: no core module imports this
package, and ``pyspark`` is imported inside the functions, so a project without Spark pays
nothing (this package imports without it). MySQL/MariaDB only, over JDBC with MariaDB
Connector/J (``DBQUEUE_SPARK_JDBC_JAR``).

* :func:`spark_session` - a SparkSession set up for this pipeline (UTC everywhere, the jar);
* :func:`enqueue_dataframe` - a DataFrame's rows as READY rows of a queue model, idempotently;
* :func:`enqueue_messages` - the same as ``Message`` rows of one kind (JSON payload per row);
* :func:`read_queue` / :func:`read_table` / :func:`read_history` - partitioned JDBC reads, UTC
  timestamps;
* :func:`queue_report` - throughput, wait/run percentiles, failure rates, top errors, retries:
  Parquet + CSV + PNG charts + a Markdown summary.

Modules, lowest first (imports only go downward): ``session`` (Java, the jar, UTC),
``read`` (JDBC targets and reads); ``columns`` then ``enqueue`` (bulk enqueue); ``render``
(CSV, Markdown), ``charts``, ``aggregates`` and ``errors`` (the report's tables), then
``report`` (:func:`queue_report`, which runs them).
"""

from __future__ import annotations

from .aggregates import OUTCOMES, PERCENTILES
from .charts import CHART_BUCKETS, CHART_POINTS
from .columns import QUEUE_BOOKKEEPING, unique_key_columns
from .enqueue import DEFAULT_BATCH_SIZE, EnqueueResult, enqueue_dataframe, enqueue_messages
from .read import (
    FETCH_SIZE,
    HISTORY_COLUMNS,
    HISTORY_TABLE,
    JDBC_DRIVER,
    JdbcTarget,
    history_table,
    jdbc_target,
    read_history,
    read_queue,
    read_table,
)
from .report import QueueReport, queue_report
from .session import (
    UTC_NAMES,
    Progress,
    SparkUnavailable,
    check_utc,
    java_executable,
    jdbc_jar,
    require_pyspark,
    spark_session,
)

__all__ = [
    "CHART_BUCKETS",
    "CHART_POINTS",
    "DEFAULT_BATCH_SIZE",
    "FETCH_SIZE",
    "HISTORY_COLUMNS",
    "HISTORY_TABLE",
    "JDBC_DRIVER",
    "OUTCOMES",
    "PERCENTILES",
    "QUEUE_BOOKKEEPING",
    "UTC_NAMES",
    "EnqueueResult",
    "JdbcTarget",
    "Progress",
    "QueueReport",
    "SparkUnavailable",
    "check_utc",
    "enqueue_dataframe",
    "enqueue_messages",
    "history_table",
    "java_executable",
    "jdbc_jar",
    "jdbc_target",
    "queue_report",
    "read_history",
    "read_queue",
    "read_table",
    "require_pyspark",
    "spark_session",
    "unique_key_columns",
]
