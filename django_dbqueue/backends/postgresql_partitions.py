"""The attempt history partitioned on PostgreSQL 13+: declarative ``PARTITION BY RANGE
(finished_at)`` with a ``DEFAULT`` catch-all.

Converting a live table (``partitionhistory --convert``) is catalog work only:

1. online, before any lock: a unique index on ``(id, finished_at)`` built ``CONCURRENTLY``, and a
   ``CHECK (finished_at < bound)`` added ``NOT VALID`` then validated (writers go on);
2. one transaction under ``ACCESS EXCLUSIVE`` on the table (the writers' wait): the table is
   renamed ``<table>_before``, its primary key becomes that index, its identity is handed to a
   new partitioned parent under the old name (same columns, indexes re-created on the empty
   parent), and the old table is attached as the partition below the bound, which the validated
   CHECK proves without a scan; the dated partitions and the DEFAULT partition are created.

Creating and dropping partitions takes a short ``ACCESS EXCLUSIVE`` lock on the parent, under
``lock_timeout`` so that it never queues writers behind a long reader; it is retried.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from datetime import datetime
from functools import partial

from django.db import OperationalError, transaction

from .partitioning import (
    HistoryPartitioning,
    Partition,
    PartitioningUnsupported,
    literal,
    parse_bound,
    partition_suffix,
)
from .sqlstate import sqlstate

logger = logging.getLogger("django_dbqueue.backends")

BOUNDS = re.compile(r"FOR VALUES FROM \((?P<lower>[^)]*)\) TO \((?P<upper>[^)]*)\)")
#: How long the conversion and each partition DDL wait for the table lock (then give up).
CONVERT_LOCK_TIMEOUT = "10s"
DDL_LOCK_TIMEOUT = "3s"
DDL_TRIES = 5


class PostgreSQLPartitioning(HistoryPartitioning):
    supported = True

    def now(self) -> datetime:
        row = self.one("SELECT statement_timestamp()")
        assert row is not None
        return row[0]

    def name(self, suffix: str) -> str:
        # PostgreSQL cuts identifiers at 63 bytes; the suffix must survive.
        return f"{self.table[: 62 - len(suffix)]}_{suffix}"

    def partitions(self) -> list[Partition] | None:
        row = self.one(
            "SELECT c.relkind, pg_get_partkeydef(c.oid) FROM pg_class c WHERE c.oid = to_regclass(%s)",
            [self.q(self.table)],
        )
        if row is None or row[0] != "p":
            return None
        if row[1] != f"RANGE ({self.time_column})":
            raise PartitioningUnsupported(
                f"{self.table} is partitioned by {row[1]}, not by RANGE ({self.time_column}) as "
                "partitionhistory makes it: the app leaves that layout alone"
            )
        with self.connection.cursor() as cursor:
            cursor.execute(
                "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid), c.reltuples::bigint "
                "FROM pg_inherits i "
                "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(%s)",
                [self.q(self.table)],
            )
            rows = cursor.fetchall()
        found = []
        for name, bound, estimate in rows:
            match = BOUNDS.match(bound)
            rows_known = None if estimate is None or estimate < 0 else int(estimate)
            if match is None:  # DEFAULT
                found.append(Partition(name, None, None, rows_known))
            else:
                found.append(
                    Partition(name, parse_bound(match["lower"]), parse_bound(match["upper"]), rows_known)
                )
        ranged = sorted((p for p in found if not p.catch_all), key=lambda p: (p.lower is not None, p.lower))
        return ranged + [p for p in found if p.catch_all]

    def create_sql(self, dated: list[tuple[datetime, datetime]]) -> list[str]:
        return [
            f"CREATE TABLE {self.q(self.name(partition_suffix(lo)))} PARTITION OF {self.q(self.table)} "
            f"FOR VALUES FROM ({literal(lo)}) TO ({literal(hi)})"
            for lo, hi in dated
        ]

    def convert(
        self, bound: datetime, dated: list[tuple[datetime, datetime]], say: Callable[[str], None]
    ) -> None:
        t, before = self.table, self.name("before")
        key, when = self.q(self.id_column), self.q(self.time_column)
        unique, check = self.name("id_time"), self.name("before_bound")
        started = time.monotonic()
        row = self.one("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", [self.q(unique)])
        if row is not None and not row[0]:  # left invalid by an interrupted CONCURRENTLY build
            self.run(f"DROP INDEX {self.q(unique)}")
        self.run(
            f"CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS {self.q(unique)} ON {self.q(t)} ({key}, {when})"
        )
        self.run(f"ALTER TABLE {self.q(t)} DROP CONSTRAINT IF EXISTS {self.q(check)}")
        if bound > self.now():
            # Writers' new rows fall below a bound in the future: the CHECK holds for them, and
            # once validated it proves the partition bound, so the attach below scans nothing.
            # (A bound in the past, --start, would refuse their inserts: the attach scans then.)
            self.run(
                f"ALTER TABLE {self.q(t)} ADD CONSTRAINT {self.q(check)} "
                f"CHECK ({when} < {literal(bound)}) NOT VALID"
            )
            self.run(f"ALTER TABLE {self.q(t)} VALIDATE CONSTRAINT {self.q(check)}")
        say(f"online preparation (index, bound check) took {time.monotonic() - started:.1f}s")
        started = time.monotonic()
        with transaction.atomic(using=self.alias):
            self.run(f"SET LOCAL lock_timeout = '{CONVERT_LOCK_TIMEOUT}'")
            self.run(f"LOCK TABLE {self.q(t)} IN ACCESS EXCLUSIVE MODE")
            self.swap(bound, dated, before, unique, check)
        say(
            f"swapped under the table lock in {time.monotonic() - started:.2f}s "
            "(writers waited at most that long)"
        )

    def swap(
        self, bound: datetime, dated: list[tuple[datetime, datetime]], before: str, unique: str, check: str
    ) -> None:
        t, key, when = self.table, self.q(self.id_column), self.q(self.time_column)
        with self.connection.cursor() as cursor:
            cursor.execute(
                "SELECT conname FROM pg_constraint WHERE conrelid = to_regclass(%s) AND contype = 'p'",
                [self.q(t)],
            )
            primary = cursor.fetchone()[0]
            cursor.execute(
                "SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i "
                "JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = to_regclass(%s) "
                "AND NOT i.indisprimary AND i.indexrelid <> to_regclass(%s)",
                [self.q(t), self.q(unique)],
            )
            indexes = cursor.fetchall()
            cursor.execute(
                "SELECT attidentity FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname = %s",
                [self.q(t), self.id_column],
            )
            identity = cursor.fetchone()[0]
        largest = int(self.max_of(self.id_column) or 0)  # type: ignore[call-overload]
        self.run(f"ALTER TABLE {self.q(t)} RENAME TO {self.q(before)}")
        self.run(f"ALTER TABLE {self.q(before)} DROP CONSTRAINT {self.q(primary)}")
        self.run(
            f"ALTER TABLE {self.q(before)} ADD CONSTRAINT {self.q(self.name('before_pkey'))} "
            f"PRIMARY KEY USING INDEX {self.q(unique)}"
        )
        for number, (name, _) in enumerate(indexes):
            # The parent takes the original names (Django's migrations know them).
            self.run(f"ALTER INDEX {self.q(name)} RENAME TO {self.q(self.name(f'before_{number}'))}")
        if identity:
            self.run(f"ALTER TABLE {self.q(before)} ALTER COLUMN {key} DROP IDENTITY")
        else:  # a serial column: its sequence stays with the old table, unused
            self.run(f"ALTER TABLE {self.q(before)} ALTER COLUMN {key} DROP DEFAULT")
        moved = self.name("moving")
        self.run(f"CREATE TEMPORARY TABLE {self.q(moved)} (LIKE {self.q(before)}) ON COMMIT DROP")
        self.run(
            f"WITH gone AS (DELETE FROM {self.q(before)} WHERE {when} >= %s RETURNING *) "
            f"INSERT INTO {self.q(moved)} SELECT * FROM gone",
            [bound],
        )
        self.run(
            f"CREATE TABLE {self.q(t)} (LIKE {self.q(before)} INCLUDING DEFAULTS INCLUDING STORAGE "
            f"INCLUDING COMMENTS) PARTITION BY RANGE ({when})"
        )
        self.run(
            f"ALTER TABLE {self.q(t)} ALTER COLUMN {key} "
            f"ADD GENERATED BY DEFAULT AS IDENTITY (START WITH {largest + 1:d})"
        )
        self.run(f"ALTER TABLE {self.q(t)} ADD CONSTRAINT {self.q(primary)} PRIMARY KEY ({key}, {when})")
        for _, definition in indexes:
            self.run(definition)  # the catalog's own text; its table name is now the parent's
        self.run(
            f"ALTER TABLE {self.q(t)} ATTACH PARTITION {self.q(before)} "
            f"FOR VALUES FROM (MINVALUE) TO ({literal(bound)})"
        )
        for sql in self.create_sql(dated):
            self.run(sql)
        self.run(f"CREATE TABLE {self.q(self.name('default'))} PARTITION OF {self.q(t)} DEFAULT")
        columns = self.column_list()
        self.run(f"INSERT INTO {self.q(t)} ({columns}) SELECT {columns} FROM {self.q(moved)}")

    def add(self, dated: list[tuple[datetime, datetime]]) -> list[str]:
        if not dated:
            return []
        catch_all = next((p.name for p in self.partitions() or [] if p.catch_all), "")

        def create() -> None:
            columns, moved = self.column_list(), self.name("moving")
            # Rows the DEFAULT partition caught for these ranges must leave it first, or the new
            # partitions' creation fails: moved out and back in, in the same transaction.
            stray = bool(catch_all) and self.one(
                f"SELECT 1 FROM {self.q(catch_all)} WHERE {self.q(self.time_column)} >= %s LIMIT 1",
                [dated[0][0]],
            )
            if stray:
                self.run(f"CREATE TEMPORARY TABLE {self.q(moved)} (LIKE {self.q(self.table)}) ON COMMIT DROP")
                self.run(
                    f"WITH gone AS (DELETE FROM {self.q(catch_all)} WHERE {self.q(self.time_column)} >= %s "
                    f"AND {self.q(self.time_column)} < %s RETURNING *) "
                    f"INSERT INTO {self.q(moved)} SELECT * FROM gone",
                    [dated[0][0], dated[-1][1]],
                )
            for sql in self.create_sql(dated):
                self.run(sql)
            if stray:
                self.run(
                    f"INSERT INTO {self.q(self.table)} ({columns}) SELECT {columns} FROM {self.q(moved)}"
                )

        self.ddl(create)
        return [self.name(partition_suffix(lo)) for lo, _ in dated]

    def drop(self, names: list[str]) -> None:
        for name in names:
            self.ddl(partial(self.run, f"DROP TABLE {self.q(name)}"))

    def ddl(self, work: Callable[[], None]) -> None:
        """One transaction under a short ``lock_timeout``, retried: waiting for a long reader
        would queue every writer of the table behind it."""
        for attempt in range(DDL_TRIES):
            try:
                with transaction.atomic(using=self.alias):
                    self.run(f"SET LOCAL lock_timeout = '{DDL_LOCK_TIMEOUT}'")
                    work()
                return
            except OperationalError as exc:
                if attempt == DDL_TRIES - 1 or sqlstate(exc) != "55P03":  # lock_not_available
                    raise
                logger.info("history partitions: a DDL waited too long for its lock; retrying")
                time.sleep(1 + attempt)
