"""The Spark (PySpark) pipeline: bulk enqueue from DataFrames, and queue-history analytics.

Optional (``pip install 'django-dbqueue[spark]'``) and isolated: no core module imports this
one, and ``pyspark`` is imported inside the functions, so a project without Spark pays
nothing. MySQL/MariaDB only, over JDBC with MariaDB Connector/J (``DBQUEUE_SPARK_JDBC_JAR``).

* :func:`spark_session` - a SparkSession set up for this pipeline (UTC everywhere, the jar);
* :func:`enqueue_dataframe` - a DataFrame's rows as READY rows of a queue model, idempotently;
* :func:`enqueue_messages` - the same as ``Message`` rows of one kind (JSON payload per row);
* :func:`read_queue` / :func:`read_history` - partitioned JDBC reads, UTC timestamps;
* :func:`queue_report` - throughput, wait/run percentiles, failure rates, top errors, retries:
  Parquet + CSV + PNG charts + a Markdown summary.

Everything runs in UTC. Connector/J converts DATETIME with the JVM's default zone, Spark shows
instants in ``spark.sql.session.timeZone`` and ``collect()`` converts with the Python
process's zone, so all three must be UTC (Django stores naive UTC with USE_TZ). A session
from :func:`spark_session` is; any other session is checked and refused if it is not.
"""

from __future__ import annotations

import csv
import logging
import os
import re
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.db import connections, router
from django.db import models as db_models

from .conf import settings
from .models import QUEUE_FIELDS, QueueMixin
from .query import _check_priority, retry_on_lock_errors
from .states import QueueState

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

logger = logging.getLogger("django_dbqueue.spark")

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
    "claimed_at",
    "finished_at",
    "outcome",
    "error",
)
OUTCOMES = ("succeeded", "failed", "retried", "lost", "released")
#: Queue bookkeeping the enqueue sets itself; a DataFrame may carry any other column
#: (``queue_priority`` and ``queue_run_at`` per row, for instance).
QUEUE_BOOKKEEPING = frozenset(QUEUE_FIELDS) - {"queue_priority", "queue_run_at"}
#: Rows per INSERT … SELECT chunk (and per JDBC batch): each chunk is its own short transaction.
DEFAULT_BATCH_SIZE = 10_000
FETCH_SIZE = 10_000
PERCENTILES = (0.5, 0.95, 0.99)
UTC_NAMES = frozenset({"UTC", "Etc/UTC", "GMT", "Etc/GMT", "Z", "+00:00", "Universal", "Zulu"})
_LABEL = re.compile(r"^[A-Za-z0-9_]+\.[A-Za-z0-9_]+\Z")

Progress = Callable[[str], None]


class SparkUnavailable(ImproperlyConfigured):
    """pyspark, Java or the JDBC driver is missing, or a session is not set up for UTC."""


# -- environment ---------------------------------------------------------------------------


def require_pyspark() -> Any:
    try:
        import pyspark
    except ImportError:
        raise SparkUnavailable(
            "pyspark is not installed: pip install 'django-dbqueue[spark]' (it needs Java 17 or 21)"
        ) from None
    return pyspark


def java_executable() -> str:
    """The ``java`` Spark will start (``$JAVA_HOME/bin/java``, else ``java`` on PATH)."""
    home = os.environ.get("JAVA_HOME")
    candidate = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not candidate or not os.access(candidate, os.X_OK):
        where = f"JAVA_HOME={home} has no bin/java" if home else "no java on PATH"
        raise SparkUnavailable(
            f"Spark needs Java 17 or 21 ({where}): apt-get install default-jre-headless, or set JAVA_HOME"
        )
    return candidate


def jdbc_jar() -> str:
    """The MariaDB Connector/J jar (``DBQUEUE_SPARK_JDBC_JAR``), checked to exist."""
    jar = settings.SPARK_JDBC_JAR
    if not jar or not os.path.isfile(jar):
        raise SparkUnavailable(
            f"MariaDB JDBC driver not found at {jar!r}: apt-get install libmariadb-java, or point "
            "DBQUEUE_SPARK_JDBC_JAR at a mariadb-java-client jar (Spark must never download it)"
        )
    return jar


def _python_utc() -> None:
    # collect() turns TimestampType into naive datetimes of the Python process's zone.
    if os.environ.get("TZ") != "UTC":
        os.environ["TZ"] = "UTC"
        time.tzset()


def spark_session(
    master: str | None = "local[*]",
    *,
    app_name: str = "django_dbqueue",
    driver_memory: str | None = "1g",
    config: dict[str, str] | None = None,
    log_level: str = "WARN",
) -> SparkSession:
    """A SparkSession for this pipeline: UTC in the JVM, the session and this process, the
    JDBC jar on the classpath, Python workers on this interpreter.

    ``master=None`` keeps whatever ``spark-submit`` chose. If a session already exists in this
    process, it is reused (Spark ignores start-up options then) and checked for UTC."""
    require_pyspark()
    jar = jdbc_jar()
    java_executable()
    _python_utc()
    # Without it, Python workers run the first python3 on PATH, not this virtualenv.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Spark's start-up chatter (default log4j profile, native-hadoop, hostname warnings) off.
    os.environ.setdefault("SPARK_CONF_DIR", str(Path(__file__).resolve().parent / "sparkconf"))
    local = master is not None and master.startswith("local")
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    utc = "-Duser.timezone=UTC"
    options = {
        "spark.jars": jar,
        "spark.driver.extraJavaOptions": utc,
        "spark.executor.extraJavaOptions": utc,
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
    }
    if local:
        options |= {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "8"}
    if driver_memory:
        options["spark.driver.memory"] = driver_memory
    for key, value in (config or {}).items():
        if key.endswith("extraJavaOptions") and "-Duser.timezone=" not in value:
            value = f"{value} {utc}"  # the caller's JVM options, still in UTC
        options[key] = value
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    for key, value in options.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    check_utc(spark)
    return spark


def check_utc(spark: SparkSession) -> None:
    """Make the session's time zone UTC; refuse a driver JVM whose default zone is not UTC."""
    _python_utc()
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    try:
        jvm_zone = spark.sparkContext._jvm.java.util.TimeZone.getDefault().getID()  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001 - Spark Connect has no driver JVM to ask
        return
    if jvm_zone not in UTC_NAMES:
        raise SparkUnavailable(
            f"the Spark driver JVM runs in {jvm_zone}, not UTC: DATETIME values would shift by its offset. "
            "Start Spark with --conf spark.driver.extraJavaOptions=-Duser.timezone=UTC "
            "--conf spark.executor.extraJavaOptions=-Duser.timezone=UTC (spark_session() does)"
        )


# -- connection ----------------------------------------------------------------------------


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
    if connection.vendor != "mysql":
        raise ImproperlyConfigured(
            f"the Spark pipeline supports MySQL/MariaDB; database {using!r} is {connection.vendor}"
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


def _resolve_model(model: type[QueueMixin] | str) -> type[QueueMixin]:
    if isinstance(model, str):
        try:
            model = apps.get_model(model)
        except (LookupError, ValueError):
            raise ImproperlyConfigured(f"unknown model {model!r}: use app_label.ModelName") from None
    if not (isinstance(model, type) and issubclass(model, QueueMixin)) or model._meta.abstract:
        raise ImproperlyConfigured(f"{model!r} is not a concrete QueueMixin model")
    return model


def _sql_datetime(value: datetime) -> str:
    if value.tzinfo is None:
        raise ValueError(f"{value!r} must be timezone-aware")
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


# -- reading ---------------------------------------------------------------------------------


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
    model = _resolve_model(model)
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
    """Any table of a database alias (e.g. a source for :func:`enqueue_dataframe`), read over
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
        return apps.get_model("django_dbqueue", "QueueAttempt")._meta.db_table
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
    until``); ``models`` keeps only these model labels. Timestamps are UTC."""
    table = table or history_table()
    target = jdbc_target(using)
    check_utc(spark)
    connection = connections[using]
    qn = connection.ops.quote_name
    where = ["1=1"]
    if since is not None:
        where.append(f"finished_at >= '{_sql_datetime(since)}'")
    if until is not None:
        where.append(f"finished_at < '{_sql_datetime(until)}'")
    if models:
        bad = [label for label in models if not _LABEL.match(label)]
        if bad:
            raise ValueError(f"not model labels (app_label.Model): {bad}")
        where.append("model IN ({})".format(", ".join(f"'{label}'" for label in models)))
    condition = " AND ".join(where)
    with connection.cursor() as cursor:
        if table not in connection.introspection.table_names(cursor):
            raise ImproperlyConfigured(
                f"no attempt-history table {table!r} in database {using!r}: "
                "install django_dbqueue's QueueAttempt model and run migrate"
            )
        cursor.execute(f"SELECT MIN(id), MAX(id) FROM {qn(table)} WHERE {condition}")
        bounds = cursor.fetchone()
    columns = ", ".join(qn(c) for c in HISTORY_COLUMNS)
    return _read_jdbc(
        spark,
        target,
        f"(SELECT {columns} FROM {qn(table)} WHERE {condition}) h",
        partition_column="id",
        bounds=bounds,
        num_partitions=num_partitions,
    )


# -- enqueue -----------------------------------------------------------------------------------


@dataclass
class EnqueueResult:
    rows: int  # rows the DataFrame had (as staged)
    inserted: int  # new queue rows
    skipped: int  # rows whose key was already there (or repeated within the DataFrame)
    chunks: int
    stage_seconds: float  # Spark -> staging table over JDBC
    insert_seconds: float  # the chunked INSERT IGNORE … SELECT
    warnings: list[str] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return self.stage_seconds + self.insert_seconds


def _spark_type(f: db_models.Field) -> str | None:
    """The Spark SQL type a DataFrame column is cast to before it is written to ``f``."""
    internal = f.get_internal_type()
    if isinstance(f, db_models.ForeignKey):
        return _spark_type(f.target_field)
    if internal in ("AutoField", "IntegerField", "SmallIntegerField", "PositiveSmallIntegerField"):
        return "int"
    if internal in ("BigAutoField", "BigIntegerField", "PositiveIntegerField", "PositiveBigIntegerField"):
        return "bigint"
    if internal == "BooleanField":
        return "boolean"
    if internal == "FloatField":
        return "double"
    if internal == "DecimalField":
        return f"decimal({f.max_digits},{f.decimal_places})"
    if internal == "DateTimeField":
        return "timestamp"
    if internal == "DateField":
        return "date"
    if internal in (
        "CharField",
        "TextField",
        "SlugField",
        "EmailField",
        "URLField",
        "UUIDField",
        "JSONField",
    ):
        return "string"
    return None  # left as it is: the driver and the server convert


def unique_key_columns(model: type[QueueMixin], using: str) -> list[tuple[str, ...]]:
    """The column sets the database enforces as unique on the model's table (PK included)."""
    connection = connections[using]
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, model._meta.db_table)
    return [tuple(c["columns"]) for c in constraints.values() if c["unique"] or c["primary_key"]]


def _key_fields(
    model: type[QueueMixin], key_columns: Sequence[str] | None, using: str
) -> list[db_models.Field]:
    opts = model._meta
    by_name = {f.name: f for f in opts.concrete_fields} | {f.column: f for f in opts.concrete_fields}
    unique_sets = unique_key_columns(model, using)
    if key_columns is None:
        candidates = [s for s in unique_sets if s != (opts.pk.column,)]
        if len(candidates) != 1:
            raise ImproperlyConfigured(
                f"{opts.label}: pass key_columns=[...] (the columns that identify a row); "
                f"unique column sets on {opts.db_table}: {candidates or 'none besides the primary key'}"
            )
        key_columns = list(candidates[0])
    if isinstance(key_columns, str):
        key_columns = [key_columns]
    fields = []
    for name in key_columns:
        if name not in by_name:
            raise ImproperlyConfigured(f"{opts.label} has no field or column {name!r} (key_columns)")
        fields.append(by_name[name])
    wanted = {f.column for f in fields}
    if not any(set(cols) == wanted for cols in unique_sets):
        cols = ", ".join(sorted(wanted))
        raise ImproperlyConfigured(
            f"{opts.label}: enqueue_dataframe needs a UNIQUE constraint on exactly ({cols}) in "
            f"{opts.db_table} - without it a re-run would enqueue every row again. Add unique=True "
            f"or Meta.constraints = [UniqueConstraint(fields=[...])] and migrate."
        )
    return fields


def enqueue_dataframe(
    df: DataFrame,
    model: type[QueueMixin] | str,
    *,
    key_columns: Sequence[str] | None = None,
    priority: int | None = None,
    run_at: datetime | timedelta | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    using: str | None = None,
    num_partitions: int | None = None,
    progress: Progress | None = None,
) -> EnqueueResult:
    """Insert ``df``'s rows as READY rows of ``model``, skipping rows whose key already exists.

    Idempotent: run it again with the same DataFrame and it inserts nothing. The key is
    ``key_columns`` (model field names or columns), which must carry a UNIQUE constraint in
    the database (checked; by default the model's only unique column set other than the
    primary key). Existing rows are left as they are, whatever their state: this inserts new
    work, it never re-queues (use ``QuerySet.enqueue()`` for that).

    DataFrame columns are model field names or column names. ``queue_priority`` and
    ``queue_run_at`` may come per row from the DataFrame; otherwise ``priority`` (default: the
    field's default) and ``run_at`` (an aware datetime, a delay, or now by the database clock)
    apply to every row. Other model fields missing from the DataFrame get their model
    default (a callable default is called once per run) or NULL.

    How: Spark writes the rows over JDBC into a per-run staging table (no UNIQUE index, an
    AUTO_INCREMENT id); then ``INSERT IGNORE … SELECT … LEFT JOIN target … WHERE target.pk IS
    NULL`` copies them in chunks of ``batch_size`` staging ids, each chunk its own short
    READ COMMITTED transaction, so workers keep claiming and finishing rows meanwhile. The
    staging table is dropped at the end, also on failure. Must not run inside a transaction.
    """
    model = _resolve_model(model)
    using = using or router.db_for_write(model) or "default"
    connection = connections[using]
    target = jdbc_target(using)
    if connection.in_atomic_block:
        raise ImproperlyConfigured(
            "enqueue_dataframe commits chunk by chunk: do not call it in a transaction"
        )
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if priority is not None:
        _check_priority(priority)
    if isinstance(run_at, datetime) and run_at.tzinfo is None:
        raise ValueError("run_at must be timezone-aware (USE_TZ is required)")
    say = progress or (lambda message: logger.info("%s", message))
    check_utc(df.sparkSession)

    opts = model._meta
    qn = connection.ops.quote_name
    by_name = {f.name: f for f in opts.concrete_fields} | {f.column: f for f in opts.concrete_fields}
    columns: list[db_models.Field] = []
    for name in df.columns:
        f = by_name.get(name)
        if f is None:
            raise ImproperlyConfigured(f"DataFrame column {name!r} is not a field or column of {opts.label}")
        if f.name in QUEUE_BOOKKEEPING:
            raise ImproperlyConfigured(
                f"DataFrame column {name!r}: the queue sets {f.name} itself "
                "(queue_priority and queue_run_at may be given per row)"
            )
        if f in columns:
            raise ImproperlyConfigured(f"DataFrame names {opts.label}.{f.name} twice")
        columns.append(f)
    given = {f.name for f in columns}
    if priority is not None and "queue_priority" in given:
        raise ImproperlyConfigured("priority= conflicts with the DataFrame's queue_priority column")
    if run_at is not None and "queue_run_at" in given:
        raise ImproperlyConfigured("run_at= conflicts with the DataFrame's queue_run_at column")
    keys = _key_fields(model, key_columns, using)
    missing_keys = [f.name for f in keys if f.name not in given]
    if missing_keys:
        raise ImproperlyConfigured(f"the DataFrame lacks the key column(s) {missing_keys}")

    # What every inserted row gets besides the DataFrame's columns: (column, SQL, params).
    fixed: list[tuple[str, str, list[Any]]] = [
        ("queue_state", "%s", [QueueState.READY.value]),
        ("queue_attempts", "0", []),
        ("queue_last_error", "''", []),
        ("queue_enqueued_at", "UTC_TIMESTAMP(6)", []),
    ]
    if "queue_priority" not in given:
        value = priority if priority is not None else opts.get_field("queue_priority").get_default()
        fixed.append(("queue_priority", "%s", [value]))
    if "queue_run_at" not in given:
        if run_at is None:
            fixed.append(("queue_run_at", "UTC_TIMESTAMP(6)", []))
        elif isinstance(run_at, timedelta):
            micros = run_at // timedelta(microseconds=1)
            fixed.append(("queue_run_at", "UTC_TIMESTAMP(6) + INTERVAL %s MICROSECOND", [micros]))
        else:
            fixed.append(("queue_run_at", "%s", [_sql_datetime(run_at)]))
    lacking = []
    set_here = {column for column, _, _ in fixed}
    for f in opts.concrete_fields:
        if f.name in given or f.column in set_here or f.primary_key:
            continue
        if f.has_default():
            fixed.append((f.column, "%s", [f.get_db_prep_save(f.get_default(), connection)]))
        elif not f.null and not f.has_db_default():
            lacking.append(f.name)
    if lacking:
        raise ImproperlyConfigured(
            f"{opts.label} fields {lacking} have no default and are not in the DataFrame"
        )

    from pyspark.sql import functions as sf

    select = []
    for name, f in zip(df.columns, columns, strict=True):
        spark_type = _spark_type(f)
        col = sf.col(f"`{name}`")
        select.append((col.cast(spark_type) if spark_type else col).alias(f.column))
    staged_df = df.select(*select)
    if num_partitions:
        staged_df = staged_df.coalesce(num_partitions)

    table = opts.db_table
    stage = f"dbqueue_stage_{uuid.uuid4().hex[:16]}"
    col_list = ", ".join(qn(f.column) for f in columns)
    pk = qn(opts.pk.column)
    t0 = time.monotonic()
    with connection.cursor() as cursor:
        # Same column types as the target, but no UNIQUE index and an id to chunk by. Not a
        # TEMPORARY table: Spark's JDBC connections are other sessions.
        cursor.execute(
            f"CREATE TABLE {qn(stage)} (_dbq_sid BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY) "
            f"ENGINE=InnoDB SELECT {col_list} FROM {qn(table)} WHERE 1=0"
        )
    try:
        say(f"staging the DataFrame into {stage} over JDBC")
        (
            staged_df.write.format("jdbc")
            .options(**target.options(dbtable=stage, batchsize=min(batch_size, 10_000)))
            .mode("append")  # never "overwrite": it would recreate the table from Spark's types
            .save()
        )
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT COUNT(*), MIN(_dbq_sid), MAX(_dbq_sid) FROM {qn(stage)}")
            rows, lo, hi = cursor.fetchone()
            nullable = [f for f in keys if f.null]
            if nullable and rows:
                # NULLs never collide in a UNIQUE index: such rows would be inserted on every run.
                where = " OR ".join(f"{qn(f.column)} IS NULL" for f in nullable)
                cursor.execute(f"SELECT COUNT(*) FROM {qn(stage)} WHERE {where}")
                (null_keys,) = cursor.fetchone()
                if null_keys:
                    raise ImproperlyConfigured(
                        f"{null_keys} of {rows} rows have a NULL key "
                        f"({', '.join(f.name for f in nullable)}): they could not "
                        "be de-duplicated; filter them out or give them a key"
                    )
        stage_seconds = time.monotonic() - t0
        say(f"staged {rows} rows in {stage_seconds:.1f}s; inserting new keys into {table}")

        insert_cols = [qn(f.column) for f in columns] + [qn(c) for c, _, _ in fixed]
        select_exprs = [f"s.{qn(f.column)}" for f in columns] + [sql for _, sql, _ in fixed]
        fixed_params = [p for _, _, params in fixed for p in params]
        join = " AND ".join(f"t.{qn(f.column)} = s.{qn(f.column)}" for f in keys)
        sql = (
            f"INSERT IGNORE INTO {qn(table)} ({', '.join(insert_cols)}) "
            f"SELECT {', '.join(select_exprs)} FROM {qn(stage)} s "
            f"LEFT JOIN {qn(table)} t ON {join} "
            f"WHERE s._dbq_sid BETWEEN %s AND %s AND t.{pk} IS NULL"
        )
        t1 = time.monotonic()
        inserted = chunks = 0
        warnings: list[str] = []
        starts = list(range(lo, hi + 1, batch_size)) if rows else []
        every = max(1, len(starts) // 10)
        for n, start in enumerate(starts, 1):
            end = start + batch_size - 1
            count, chunk_warnings = retry_on_lock_errors(
                using,
                lambda s=start, e=end: _insert_chunk(connection, sql, [*fixed_params, s, e]),
                "enqueue chunk",
            )
            inserted += count
            chunks += 1
            warnings.extend(chunk_warnings)
            if n % every == 0 or n == len(starts):
                say(f"chunk {n}/{len(starts)}: {inserted} inserted so far")
        insert_seconds = time.monotonic() - t1
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS {qn(stage)}")
    for text in warnings[:20]:
        logger.warning("enqueue_dataframe into %s: %s", table, text)
    result = EnqueueResult(
        rows=rows,
        inserted=inserted,
        skipped=rows - inserted,
        chunks=chunks,
        stage_seconds=stage_seconds,
        insert_seconds=insert_seconds,
        warnings=warnings,
    )
    logger.info(
        "%s: %d inserted, %d skipped of %d rows in %.1fs",
        opts.label,
        result.inserted,
        result.skipped,
        result.rows,
        result.seconds,
    )
    return result


def enqueue_messages(
    df: DataFrame,
    kind: str,
    *,
    key_column: str = "key",
    payload_columns: Sequence[str] | None = None,
    queue: str = "default",
    priority: int | None = None,
    run_at: datetime | timedelta | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    using: str | None = None,
    progress: Progress | None = None,
) -> EnqueueResult:
    """Publish one :class:`~django_dbqueue.messages.Message` of ``kind`` per row, idempotently.

    ``key_column`` holds each message's de-duplication key (unique per kind, never NULL
    here); the payload is a JSON object of ``payload_columns`` (default: every other
    column), built by Spark's ``to_json``. Same guarantees as :func:`enqueue_dataframe`."""
    from pyspark.sql import functions as sf

    from .handlers import NAME
    from .messages import Message

    if not NAME.match(kind):
        raise ValueError(f"message kind {kind!r}: use 1-100 letters, digits and _ . : -")
    if not NAME.match(queue) or len(queue) > 64:
        raise ValueError(f"queue name {queue!r}: use 1-64 letters, digits and _ . : -")
    if key_column not in df.columns:
        raise ImproperlyConfigured(f"the DataFrame has no key column {key_column!r}")
    if payload_columns is None:
        payload_columns = [c for c in df.columns if c != key_column]
    missing = [c for c in payload_columns if c not in df.columns]
    if missing:
        raise ImproperlyConfigured(f"the DataFrame has no payload column(s) {missing}")
    payload = sf.to_json(sf.struct(*[sf.col(f"`{c}`") for c in payload_columns])) if payload_columns else None
    messages = df.select(
        sf.lit(kind).alias("kind"),
        sf.col(f"`{key_column}`").cast("string").alias("key"),
        (payload if payload is not None else sf.lit(None).cast("string")).alias("payload"),
        sf.lit(queue).alias("queue"),
    )
    if payload is not None:
        (largest,) = messages.agg(sf.max(sf.octet_length("payload"))).first() or (None,)
        if largest is not None and largest > settings.MAX_PAYLOAD_BYTES:
            raise ValueError(
                f"a {kind!r} payload is {largest} bytes; the limit is {settings.MAX_PAYLOAD_BYTES} "
                "(DBQUEUE_MAX_PAYLOAD_BYTES)"
            )
    return enqueue_dataframe(
        messages,
        Message,
        key_columns=["kind", "key"],
        priority=priority,
        run_at=run_at,
        batch_size=batch_size,
        using=using,
        progress=progress,
    )


def _insert_chunk(connection: Any, sql: str, params: list[Any]) -> tuple[int, list[str]]:
    with connection.cursor() as cursor:
        # One autocommit statement per chunk. READ COMMITTED reads the source rows without
        # shared locks, so claims and outcomes of running workers never wait on this.
        cursor.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        cursor.execute(sql, params)
        count = cursor.rowcount
        warnings: list[str] = []
        cursor.execute("SHOW WARNINGS")
        for _level, code, message in cursor.fetchall():
            if code != 1062:  # a duplicate within the DataFrame: expected, counted as skipped
                warnings.append(f"{code}: {message}")
    return count, warnings


# -- report --------------------------------------------------------------------------------------


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
                collected[name] = _collect_utc(table)
                files[f"{name}.csv"] = _write_csv(out / f"{name}.csv", collected[name], table.columns)
            finally:
                table.unpersist()
        # Charts keep a readable number of points: a week of minutes is drawn in 30-minute
        # buckets (exact percentiles per bucket, throughput averaged per minute).
        bucket = _chart_bucket(collected["summary"])
        chart_rows = collected["per_minute"]
        if bucket > 1:
            say(f"aggregating {bucket}-minute buckets for the charts")
            seconds = bucket * 60
            start = sf.timestamp_seconds(sf.floor(sf.unix_seconds("finished_at") / seconds) * seconds)
            chart_rows = _collect_utc(
                _split_percentiles(
                    h.groupBy("model", start.alias("bucket_start"))
                    .agg(*_aggregates(sf))
                    .withColumn("completed", completed)
                    .withColumnRenamed("bucket_start", "minute"),
                    ["wait_s", "run_s"],
                ).orderBy("model", "minute")
            )
        files["throughput.png"], files["latency.png"] = _charts(out, chart_rows, bucket)
        report = QueueReport(
            out=out,
            files=files,
            summary=collected["summary"],
            top_errors=collected["top_errors"],
            seconds=time.monotonic() - started,
        )
        files["report.md"] = _markdown(out / "report.md", report, since, until)
    finally:
        h.unpersist()
    say(f"report written to {out} in {report.seconds:.1f}s")
    return report


def _collect_utc(df: DataFrame) -> list[dict[str, Any]]:
    """Rows as dicts, timestamps as ISO strings in UTC (formatted by Spark, not by Python)."""
    from pyspark.sql import functions as sf
    from pyspark.sql.types import TimestampType

    cols = [
        sf.date_format(f.name, "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'").alias(f.name)
        if isinstance(f.dataType, TimestampType)
        else sf.col(f.name)
        for f in df.schema.fields
    ]
    return [row.asDict() for row in df.select(*cols).collect()]


def _write_csv(path: Path, rows: list[dict[str, Any]], columns: list[str]) -> Path:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


def _parse_utc(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


#: Longest time bucket of the charts' points, in minutes, and how many points a line may have.
CHART_BUCKETS = (1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440)
CHART_POINTS = 400


def _chart_bucket(summary: list[dict[str, Any]]) -> int:
    if not summary:
        return 1
    first = min(_parse_utc(r["first_finished"]) for r in summary)
    last = max(_parse_utc(r["last_finished"]) for r in summary)
    minutes = (last - first).total_seconds() / 60
    return next((b for b in CHART_BUCKETS if minutes / b <= CHART_POINTS), CHART_BUCKETS[-1])


def _charts(out: Path, per_bucket: list[dict[str, Any]], bucket: int = 1) -> tuple[Path, Path]:
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend

    by_model: dict[str, list[dict[str, Any]]] = {}
    for row in per_bucket:
        by_model.setdefault(row["model"], []).append(row)

    def setup(ax: Any, ylabel: str) -> None:
        locator = AutoDateLocator()
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)

    fig = Figure(figsize=(11, 6), layout="constrained")
    ax_done, ax_fail = fig.subplots(2, 1, sharex=True)
    for model, rows in sorted(by_model.items()):
        x = [_parse_utc(r["minute"]) for r in rows]
        ax_done.plot(x, [r["completed"] / bucket for r in rows], label=model, linewidth=1)
        failed = [(r["failed"] + r["retried"] + r["lost"]) / bucket for r in rows]
        ax_fail.plot(x, failed, label=model, linewidth=1)
    setup(ax_done, "completed jobs / minute")
    setup(ax_fail, "failed attempts / minute")
    per = "minute" if bucket == 1 else f"{bucket}-minute bucket"
    averaged = "" if bucket == 1 else f" (mean per minute over {bucket}-minute buckets)"
    ax_done.set_title(f"Queue throughput, UTC{averaged}")
    if by_model:
        ax_done.legend(loc="upper right", fontsize="small")
    throughput = out / "throughput.png"
    fig.savefig(throughput, dpi=100)

    fig = Figure(figsize=(11, 6), layout="constrained")
    ax_wait, ax_run = fig.subplots(2, 1, sharex=True)
    for model, rows in sorted(by_model.items()):
        x = [_parse_utc(r["minute"]) for r in rows]
        for ax, prefix in ((ax_wait, "wait_s"), (ax_run, "run_s")):
            (line,) = ax.plot(x, [r[f"{prefix}_p50"] for r in rows], label=f"{model} p50", linewidth=1)
            ax.plot(
                x,
                [r[f"{prefix}_p95"] for r in rows],
                label=f"{model} p95",
                linewidth=1,
                linestyle="--",
                color=line.get_color(),
            )
    setup(ax_wait, "wait (enqueued → claimed), s")
    setup(ax_run, "run (claimed → finished), s")
    ax_wait.set_title(f"Latency per {per}, UTC: p50 solid, p95 dashed")
    if by_model:
        ax_wait.legend(loc="upper right", fontsize="small")
    latency = out / "latency.png"
    fig.savefig(latency, dpi=100)
    return throughput, latency


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _markdown(path: Path, report: QueueReport, since: datetime | None, until: datetime | None) -> Path:
    start = _sql_datetime(since) if since else "the beginning"
    window = f"{start} to {_sql_datetime(until) if until else 'now'} (UTC)"
    lines = [
        "# Queue report",
        "",
        f"Attempts finished from {window}. Generated {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC "
        f"in {report.seconds:.1f} s. Times in seconds; wait = claimed - enqueued, run = finished - claimed.",
        "",
    ]
    if not report.summary:
        lines.append("No finished attempts in this window.")
    else:
        lines += [
            "| model | jobs | attempts | succeeded | failed | retried | lost | released "
            "| attempt failure rate | job failure rate | jobs/min "
            "| wait p50 | wait p95 | wait p99 | run p50 | run p95 | run p99 |",
            "|---|" + "---:|" * 16,
        ]
        for s in report.summary:
            rate = _fmt(s["attempt_failure_rate"] * 100 if s["attempt_failure_rate"] is not None else None, 1)
            job_rate = _fmt(s["job_failure_rate"] * 100 if s["job_failure_rate"] is not None else None, 1)
            lines.append(
                f"| {s['model']} | {s['jobs']} | {s['attempts']} | {s['succeeded']} | {s['failed']} | "
                f"{s['retried']} | {s['lost']} | {s['released']} | {rate} % | {job_rate} % | "
                f"{_fmt(s['completed_per_minute'], 1)} | "
                + " | ".join(_fmt(s[f"{p}_p{q}"]) for p in ("wait_s", "run_s") for q in (50, 95, 99))
                + " |"
            )
        lines += ["", "## Top errors", ""]
        if report.top_errors:
            lines += ["| model | count | last seen | message |", "|---|---:|---|---|"]
            for e in report.top_errors:
                text = str(e["message"]).replace("|", "\\|")
                lines.append(f"| {e['model']} | {e['count']} | {e['last_seen']} | `{text}` |")
        else:
            lines.append("No errors.")
    lines += ["", "## Files", ""]
    lines += [f"* `{name}`: {p.relative_to(report.out)}" for name, p in report.files.items()]
    lines += ["", "![throughput](throughput.png)", "", "![latency](latency.png)", ""]
    path.write_text("\n".join(lines))
    return path
