"""Bulk enqueue from DataFrames: a DataFrame's rows as READY rows of a queue model (or as
``Message`` rows), idempotently, through a per-run staging table and a chunked
``INSERT IGNORE … SELECT`` anti-join.

The staging table is the fastest idempotent path measured (Spark JDBC has no INSERT IGNORE or
upsert mode) and keeps every step plain SQL that can be retried.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured
from django.db import connections, router
from django.db.models import Field

# The only names this package takes from the core's internals, imported in one place so a
# rebuilt core has a single site to repoint.
from ..backends import retry_on_lock_conflicts as retry_on_lock_errors
from ..conf import settings
from ..models import QueueMixin
from ..queue.queryset import check_priority as _check_priority
from .columns import Fixed, column_of, dataframe_fields, fixed_values, key_fields, spark_type
from .read import jdbc_target, resolve_model
from .session import Progress, check_utc

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

logger = logging.getLogger("django_dbqueue.spark")

#: Rows per INSERT … SELECT chunk (and per JDBC batch): each chunk is its own short transaction.
DEFAULT_BATCH_SIZE = 10_000


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
    model = resolve_model(model)
    using = using or router.db_for_write(model) or "default"
    _check_arguments(model, using, batch_size, priority, run_at)
    check_utc(df.sparkSession)
    columns = dataframe_fields(df.columns, model, priority, run_at)
    given = {f.name for f in columns}
    keys = key_fields(model, key_columns, using)
    missing_keys = [f.name for f in keys if f.name not in given]
    if missing_keys:
        raise ImproperlyConfigured(f"the DataFrame lacks the key column(s) {missing_keys}")
    run = _StagedRun(
        model=model,
        using=using,
        columns=columns,
        keys=keys,
        fixed=fixed_values(model, given, priority, run_at, using),
        say=progress or (lambda message: logger.info("%s", message)),
    )
    result = run.execute(_staged_frame(df, columns, num_partitions), batch_size)
    for text in result.warnings[:20]:
        logger.warning("enqueue_dataframe into %s: %s", model._meta.db_table, text)
    logger.info(
        "%s: %d inserted, %d skipped of %d rows in %.1fs",
        model._meta.label,
        result.inserted,
        result.skipped,
        result.rows,
        result.seconds,
    )
    return result


def _check_arguments(
    model: type[QueueMixin],
    using: str,
    batch_size: int,
    priority: int | None,
    run_at: datetime | timedelta | None,
) -> None:
    """Refuse what would fail half-way, before Spark does any work."""
    if connections[using].in_atomic_block:
        raise ImproperlyConfigured(
            "enqueue_dataframe commits chunk by chunk: do not call it in a transaction"
        )
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if priority is not None:
        _check_priority(priority, model)
    if isinstance(run_at, datetime) and run_at.tzinfo is None:
        raise ValueError("run_at must be timezone-aware (USE_TZ is required)")


def _staged_frame(df: DataFrame, columns: Sequence[Field], num_partitions: int | None) -> DataFrame:
    """``df`` with its columns cast to the target's types and named as the target's columns."""
    from pyspark.sql import functions as sf

    select = []
    for name, f in zip(df.columns, columns, strict=True):
        cast = spark_type(f)
        col = sf.col(f"`{name}`")
        select.append((col.cast(cast) if cast else col).alias(column_of(f)))
    staged = df.select(*select)
    return staged.coalesce(num_partitions) if num_partitions else staged


@dataclass
class _StagedRun:
    """One run of :func:`enqueue_dataframe`: its staging table, and the statements on it."""

    model: type[QueueMixin]
    using: str
    columns: Sequence[Field]
    keys: Sequence[Field]
    fixed: Sequence[Fixed]
    say: Progress
    stage: str = field(default_factory=lambda: f"dbqueue_stage_{uuid.uuid4().hex[:16]}")

    @property
    def connection(self) -> Any:
        return connections[self.using]

    def qn(self, name: str) -> str:
        return self.connection.ops.quote_name(name)

    def execute(self, staged_df: DataFrame, batch_size: int) -> EnqueueResult:
        t0 = time.monotonic()
        self._create_stage()
        try:
            self.say(f"staging the DataFrame into {self.stage} over JDBC")
            (
                staged_df.write.format("jdbc")
                .options(
                    **jdbc_target(self.using).options(dbtable=self.stage, batchsize=min(batch_size, 10_000))
                )
                .mode("append")  # never "overwrite": it would recreate the table from Spark's types
                .save()
            )
            rows, lo, hi = self._staged_range()
            stage_seconds = time.monotonic() - t0
            table = self.model._meta.db_table
            self.say(f"staged {rows} rows in {stage_seconds:.1f}s; inserting new keys into {table}")
            t1 = time.monotonic()
            inserted, chunks, warnings = self._insert(
                range(lo, hi + 1, batch_size) if rows else range(0), batch_size
            )
            insert_seconds = time.monotonic() - t1
        finally:
            with self.connection.cursor() as cursor:
                cursor.execute(f"DROP TABLE IF EXISTS {self.qn(self.stage)}")
        return EnqueueResult(
            rows=rows,
            inserted=inserted,
            skipped=rows - inserted,
            chunks=chunks,
            stage_seconds=stage_seconds,
            insert_seconds=insert_seconds,
            warnings=warnings,
        )

    def _create_stage(self) -> None:
        col_list = ", ".join(self.qn(column_of(f)) for f in self.columns)
        with self.connection.cursor() as cursor:
            # Same column types as the target, but no UNIQUE index and an id to chunk by. Not a
            # TEMPORARY table: Spark's JDBC connections are other sessions.
            cursor.execute(
                f"CREATE TABLE {self.qn(self.stage)} (_dbq_sid BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY) "
                f"ENGINE=InnoDB SELECT {col_list} FROM {self.qn(self.model._meta.db_table)} WHERE 1=0"
            )

    def _staged_range(self) -> tuple[int, int, int]:
        """How many rows were staged and their staging ids' range; refuses NULL keys."""
        qn, stage = self.qn, self.qn(self.stage)
        with self.connection.cursor() as cursor:
            cursor.execute(f"SELECT COUNT(*), MIN(_dbq_sid), MAX(_dbq_sid) FROM {stage}")
            rows, lo, hi = cursor.fetchone()
            nullable = [f for f in self.keys if f.null]
            if nullable and rows:
                # NULLs never collide in a UNIQUE index: such rows would be inserted on every run.
                where = " OR ".join(f"{qn(column_of(f))} IS NULL" for f in nullable)
                cursor.execute(f"SELECT COUNT(*) FROM {stage} WHERE {where}")
                (null_keys,) = cursor.fetchone()
                if null_keys:
                    raise ImproperlyConfigured(
                        f"{null_keys} of {rows} rows have a NULL key "
                        f"({', '.join(f.name for f in nullable)}): they could not "
                        "be de-duplicated; filter them out or give them a key"
                    )
        return rows, lo, hi

    def _insert_sql(self) -> str:
        qn = self.qn
        table, pk = qn(self.model._meta.db_table), qn(column_of(self.model._meta.pk))
        insert_cols = [qn(column_of(f)) for f in self.columns] + [qn(c) for c, _, _ in self.fixed]
        select_exprs = [f"s.{qn(column_of(f))}" for f in self.columns] + [sql for _, sql, _ in self.fixed]
        join = " AND ".join(f"t.{qn(column_of(f))} = s.{qn(column_of(f))}" for f in self.keys)
        return (
            f"INSERT IGNORE INTO {table} ({', '.join(insert_cols)}) "
            f"SELECT {', '.join(select_exprs)} FROM {qn(self.stage)} s "
            f"LEFT JOIN {table} t ON {join} "
            f"WHERE s._dbq_sid BETWEEN %s AND %s AND t.{pk} IS NULL"
        )

    def _insert(self, starts: range, batch_size: int) -> tuple[int, int, list[str]]:
        """Copy the new keys in chunks of ``batch_size`` staging ids, each its own statement."""
        sql = self._insert_sql()
        fixed_params = [p for _, _, params in self.fixed for p in params]
        inserted = chunks = 0
        warnings: list[str] = []
        every = max(1, len(starts) // 10)
        for n, start in enumerate(starts, 1):
            params = [*fixed_params, start, start + batch_size - 1]
            count, chunk_warnings = retry_on_lock_errors(
                self.using, partial(_insert_chunk, self.connection, sql, params), "enqueue chunk"
            )
            inserted += count
            chunks += 1
            warnings.extend(chunk_warnings)
            if n % every == 0 or n == len(starts):
                self.say(f"chunk {n}/{len(starts)}: {inserted} inserted so far")
        return inserted, chunks, warnings


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

    from ..messaging.handlers import NAME
    from ..models import Message

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
        # Plain messages, not a topic's copies: the de-duplication key is (kind, key, group).
        sf.lit("").alias("group"),
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
        key_columns=["kind", "key", "group"],
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
