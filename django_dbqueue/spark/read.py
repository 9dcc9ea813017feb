"""Reading over JDBC: a queue model's table, any table, and the attempt history.

Reads are partitioned by primary-key ranges (one connection and one range query per
partition) and stream with ``fetchsize``: without it Connector/J buffers a whole partition in
the driver's heap.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.db import connections, router
from django.db import models as db_models

from ..backends import backend_for
from ..models import QueueMixin
from ..tables.attempt import QueueAttempt
from .session import check_utc

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: MariaDB Connector/J. Spark picks its MySQL dialect only for ``jdbc:mysql:`` URLs; with
#: ``jdbc:mariadb:`` it quotes names with ``"`` and reads the column names as values.
JDBC_DRIVER = "org.mariadb.jdbc.Driver"
#: The attempt-history table (model ``django_dbqueue.QueueAttempt``) when the model is absent.
HISTORY_TABLE = "django_dbqueue_queueattempt"
HISTORY_COLUMNS = (
    "id",
    "model",
    "object_id",
    "attempt",
    "worker_id",
    "enqueued_at",
    "due_at",
    "claimed_at",
    "finished_at",
    "outcome",
    "error",
)
#: History columns a table may lack, with their Spark type (``due_at`` came later).
OPTIONAL_HISTORY_COLUMNS = {"due_at": "timestamp"}
FETCH_SIZE = 10_000
_LABEL = re.compile(r"^[A-Za-z0-9_]+\.[A-Za-z0-9_]+\Z")


@dataclass(frozen=True)
class JdbcTarget:
    """JDBC URL and properties for one Django database alias."""

    alias: str
    url: str
    user: str
    password: str = field(repr=False)

    def options(self, **extra: Any) -> dict[str, str]:
        opts = {"url": self.url, "driver": JDBC_DRIVER, "user": self.user}
        if self.password:
            opts["password"] = self.password
        opts.update({key: str(value) for key, value in extra.items()})
        return opts


def jdbc_target(using: str = "default") -> JdbcTarget:
    """JDBC settings from ``DATABASES[using]``, so ``spark-submit`` needs only the settings module."""
    if using not in connections:
        raise ImproperlyConfigured(f"unknown database alias {using!r}")
    connection = connections[using]
    backend = backend_for(using)
    if not backend.spark_jdbc:
        raise ImproperlyConfigured(
            f"the Spark pipeline supports MySQL/MariaDB; database {using!r} is {backend.describe()}"
        )
    db = connection.settings_dict
    host = db.get("HOST") or "127.0.0.1"
    if host.startswith("/"):
        raise ImproperlyConfigured(
            f"database {using!r} uses a Unix socket ({host}); JDBC needs a TCP host and port"
        )
    port = db.get("PORT") or 3306
    # rewriteBatchedStatements: multi-row INSERTs, 4x faster writes. permitMysqlScheme keeps the
    # jdbc:mysql: URL valid on Connector/J 3.x (2.7 accepts it as it is).
    url = (
        f"jdbc:mysql://{host}:{port}/{db['NAME']}?permitMysqlScheme"
        "&rewriteBatchedStatements=true&sessionVariables=time_zone='+00:00'"
    )
    return JdbcTarget(alias=using, url=url, user=db.get("USER") or "", password=db.get("PASSWORD") or "")


def _read_jdbc(
    spark: SparkSession,
    target: JdbcTarget,
    dbtable: str,
    *,
    partition_column: str | None = None,
    bounds: tuple[Any, Any] | None = None,
    num_partitions: int | None = None,
) -> DataFrame:
    opts = target.options(dbtable=dbtable, fetchsize=FETCH_SIZE)
    partitions = num_partitions or spark.sparkContext.defaultParallelism
    if partition_column and bounds and None not in bounds and partitions > 1 and bounds[1] > bounds[0]:
        # Bounds only set the stride; rows outside them still land in the first/last partition.
        opts |= {
            "partitionColumn": partition_column,
            "lowerBound": str(bounds[0]),
            "upperBound": str(bounds[1] + 1),
            "numPartitions": str(min(partitions, bounds[1] - bounds[0] + 1)),
        }
    return spark.read.format("jdbc").options(**opts).load()


def resolve_model(model: type[QueueMixin] | str) -> type[QueueMixin]:
    """A concrete queue model from a class or an ``app_label.Model`` label."""
    if isinstance(model, str):
        try:
            model = apps.get_model(model)
        except (LookupError, ValueError):
            raise ImproperlyConfigured(f"unknown model {model!r}: use app_label.ModelName") from None
    if not (isinstance(model, type) and issubclass(model, QueueMixin)) or model._meta.abstract:
        raise ImproperlyConfigured(f"{model!r} is not a concrete QueueMixin model")
    return model


def read_queue(
    spark: SparkSession,
    model: type[QueueMixin] | str,
    *,
    using: str | None = None,
    num_partitions: int | None = None,
) -> DataFrame:
    """A queue model's table as a DataFrame, read over JDBC in primary-key ranges.

    Columns keep their database names (a ForeignKey is ``<name>_id``); DATETIME columns are
    UTC timestamps. Filters and column selections are pushed down to the database."""
    model = resolve_model(model)
    using = using or router.db_for_read(model) or "default"
    target = jdbc_target(using)
    check_utc(spark)
    pk = model._meta.pk
    bounds = None
    if isinstance(pk, db_models.IntegerField | db_models.AutoField):
        agg = model._default_manager.using(using).aggregate(lo=db_models.Min("pk"), hi=db_models.Max("pk"))
        bounds = (agg["lo"], agg["hi"])
    df = _read_jdbc(
        spark,
        target,
        connections[using].ops.quote_name(model._meta.db_table),
        partition_column=pk.column if bounds else None,
        bounds=bounds,
        num_partitions=num_partitions,
    )
    # PositiveIntegerField is INT UNSIGNED, which Spark widens to bigint.
    return df.withColumn("queue_attempts", df["queue_attempts"].cast("int"))


def read_table(
    spark: SparkSession, table: str, *, using: str = "default", num_partitions: int | None = None
) -> DataFrame:
    """Any table of a database alias (e.g. a source for ``enqueue_dataframe``), read over
    JDBC in ranges of its primary key when that is a single integer column."""
    target = jdbc_target(using)
    check_utc(spark)
    connection = connections[using]
    qn = connection.ops.quote_name
    with connection.cursor() as cursor:
        if table not in connection.introspection.table_names(cursor):
            raise ImproperlyConfigured(f"no table {table!r} in database {using!r}")
        pk = connection.introspection.get_primary_key_column(cursor, table)
        bounds = None
        if pk:
            cursor.execute(f"SELECT MIN({qn(pk)}), MAX({qn(pk)}) FROM {qn(table)}")
            bounds = cursor.fetchone()
            if not all(isinstance(b, int) for b in bounds):
                bounds = None
    return _read_jdbc(
        spark,
        target,
        qn(table),
        partition_column=pk if bounds else None,
        bounds=bounds,
        num_partitions=num_partitions,
    )


def history_table() -> str:
    """The attempt-history table: ``QueueAttempt``'s when it is installed, else the default name."""
    try:
        return QueueAttempt._meta.db_table
    except LookupError:
        return HISTORY_TABLE


def read_history(
    spark: SparkSession,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    models: Sequence[str] | None = None,
    using: str = "default",
    table: str | None = None,
    num_partitions: int | None = None,
) -> DataFrame:
    """Attempt history (one row per finished attempt), read over JDBC in id ranges.

    ``since``/``until`` (aware datetimes) bound ``finished_at`` (``since <= finished_at <
    until``); ``models`` keeps only these model labels. Timestamps are UTC. A table without
    ``due_at`` (history written before it was recorded) reads it as NULL."""
    from pyspark.sql import functions as sf

    table = table or history_table()
    target = jdbc_target(using)
    check_utc(spark)
    for value in (since, until):
        if value is not None and value.tzinfo is None:
            raise ValueError(f"{value!r} must be timezone-aware")
    if models:
        bad = [label for label in models if not _LABEL.match(label)]
        if bad:
            raise ValueError(f"not model labels (app_label.Model): {bad}")
    connection = connections[using]
    qn = connection.ops.quote_name
    adapt = connection.ops.adapt_datetimefield_value
    conditions, params = ["1=1"], []
    if since is not None:
        conditions.append("finished_at >= %s")
        params.append(adapt(since))
    if until is not None:
        conditions.append("finished_at < %s")
        params.append(adapt(until))
    if models:
        conditions.append(f"model IN ({', '.join(['%s'] * len(models))})")
        params.extend(models)
    with connection.cursor() as cursor:
        if table not in connection.introspection.table_names(cursor):
            raise ImproperlyConfigured(
                f"no attempt-history table {table!r} in database {using!r}: "
                "install django_dbqueue's QueueAttempt model and run migrate"
            )
        present = {c.name for c in connection.introspection.get_table_description(cursor, table)}
        lacking = [c for c in HISTORY_COLUMNS if c not in present and c not in OPTIONAL_HISTORY_COLUMNS]
        if lacking:
            raise ImproperlyConfigured(f"the history table {table!r} has no column(s) {lacking}")
        cursor.execute(f"SELECT MIN(id), MAX(id) FROM {qn(table)} WHERE {' AND '.join(conditions)}", params)
        bounds = cursor.fetchone()
    df = _read_jdbc(
        spark, target, qn(table), partition_column="id", bounds=bounds, num_partitions=num_partitions
    )
    # The same bounds again, for the rows: Spark pushes these filters into every partition's
    # query, with its dialect's literals (JDBC takes no parameters in dbtable).
    if since is not None:
        df = df.where(sf.col("finished_at") >= sf.lit(since))
    if until is not None:
        df = df.where(sf.col("finished_at") < sf.lit(until))
    if models:
        df = df.where(sf.col("model").isin(list(models)))
    return df.select(
        *(
            sf.col(c) if c in present else sf.lit(None).cast(OPTIONAL_HISTORY_COLUMNS[c]).alias(c)
            for c in HISTORY_COLUMNS
        )
    )
