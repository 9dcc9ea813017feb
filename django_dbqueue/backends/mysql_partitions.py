"""The attempt history partitioned on MySQL 8 / MariaDB 10.6+: ``PARTITION BY RANGE COLUMNS
(finished_at)`` with a ``MAXVALUE`` catch-all.

Converting a live table (``partitionhistory --convert``):

1. the primary key becomes ``(id, finished_at)`` online (``ALGORITHM=INPLACE, LOCK=NONE``: a
   rebuild that lets writers go on);
2. an empty partitioned twin is created (``CREATE TABLE … LIKE``), its AUTO_INCREMENT set past
   the old table's ids with room to spare for the rows written until the swap;
3. ``RENAME TABLE`` swaps the two atomically: writers now insert into the partitioned table;
4. ``EXCHANGE PARTITION`` swaps the old table's rows into the first partition (the writers'
   wait: MariaDB 10.11 checks every exchanged row against the bound), and the few rows written
   between 3 and 4, which the exchange moved to the old table, are copied back, ids kept.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime

from django.db import OperationalError

from django_dbqueue.compat import UTC

from .partitioning import HistoryPartitioning, Partition, literal, parse_bound, partition_suffix

logger = logging.getLogger("django_dbqueue.backends")

#: Ids left free between the old table's largest id and the partitioned table's first one.
ID_ROOM = 1_000_000
#: Seconds a partition DDL waits for the table's metadata lock before it gives up (and is
#: retried): while it waits, every later statement on the table queues behind it.
DDL_LOCK_WAIT = 5
DDL_TRIES = 5


class MySQLPartitioning(HistoryPartitioning):
    supported = True
    catch_all = "p_max"
    first = "p_before"

    def now(self) -> datetime:
        row = self.one("SELECT UTC_TIMESTAMP(6)")
        assert row is not None
        return row[0].replace(tzinfo=UTC)

    def partitions(self) -> list[Partition] | None:
        with self.connection.cursor() as cursor:
            cursor.execute(
                "SELECT partition_name, partition_method, partition_description, table_rows "
                "FROM information_schema.partitions WHERE table_schema = DATABASE() AND table_name = %s "
                "ORDER BY partition_ordinal_position",
                [self.table],
            )
            rows = cursor.fetchall()
        if not rows or rows[0][0] is None:
            return None
        if rows[0][1] != "RANGE COLUMNS":
            raise self.unsupported_layout(rows[0][1])
        found, lower = [], None
        for name, _, description, estimate in rows:
            upper = parse_bound(description)
            found.append(Partition(name, lower, upper, None if estimate is None else int(estimate)))
            lower = upper
        return found

    def unsupported_layout(self, method: str) -> Exception:
        from .partitioning import PartitioningUnsupported

        return PartitioningUnsupported(
            f"{self.table} is partitioned by {method}, not by RANGE COLUMNS({self.time_column}) as "
            "partitionhistory makes it: the app leaves that layout alone"
        )

    def definitions(self, dated: list[tuple[datetime, datetime]]) -> list[str]:
        return [f"PARTITION {partition_suffix(lo)} VALUES LESS THAN ({literal(hi)})" for lo, hi in dated]

    def convert(
        self, bound: datetime, dated: list[tuple[datetime, datetime]], say: Callable[[str], None]
    ) -> None:
        t, old, new = self.table, f"{self.table}_unpartitioned", f"{self.table}_partitioned"
        key, when = self.q(self.id_column), self.q(self.time_column)
        with self.connection.cursor() as cursor:
            cursor.execute(
                "SELECT column_name FROM information_schema.key_column_usage WHERE table_schema = DATABASE() "
                "AND table_name = %s AND constraint_name = 'PRIMARY' ORDER BY ordinal_position",
                [t],
            )
            primary = [row[0] for row in cursor.fetchall()]
        if primary != [self.id_column, self.time_column]:
            started = time.monotonic()
            self.run(
                f"ALTER TABLE {self.q(t)} DROP PRIMARY KEY, ADD PRIMARY KEY ({key}, {when}), "
                "ALGORITHM=INPLACE, LOCK=NONE"
            )
            say(
                f"primary key ({self.id_column}, {self.time_column}) built online "
                f"in {time.monotonic() - started:.1f}s"
            )
        self.run(f"DROP TABLE IF EXISTS {self.q(new)}")  # a twin left by a conversion that failed
        self.run(f"CREATE TABLE {self.q(new)} LIKE {self.q(t)}")
        parts = [
            f"PARTITION {self.first} VALUES LESS THAN ({literal(bound)})",
            *self.definitions(dated),
            f"PARTITION {self.catch_all} VALUES LESS THAN (MAXVALUE)",
        ]
        self.run(f"ALTER TABLE {self.q(new)} PARTITION BY RANGE COLUMNS({when}) ({', '.join(parts)})")
        largest = int(self.max_of(self.id_column) or 0)  # type: ignore[call-overload]
        self.run(f"ALTER TABLE {self.q(new)} AUTO_INCREMENT = {largest + ID_ROOM:d}")
        started = time.monotonic()
        with self.lock_wait(30):
            self.run(f"RENAME TABLE {self.q(t)} TO {self.q(old)}, {self.q(new)} TO {self.q(t)}")
            columns = self.column_list()
            # Rows at or past the bound (with --start) belong in the dated partitions: the old
            # table takes no more writes since the rename, so they move without a race.
            self.run(
                f"INSERT INTO {self.q(t)} ({columns}) SELECT {columns} FROM {self.q(old)} WHERE {when} >= %s",
                [self.value(bound)],
            )
            self.run(f"DELETE FROM {self.q(old)} WHERE {when} >= %s", [self.value(bound)])
            self.run(f"ALTER TABLE {self.q(t)} EXCHANGE PARTITION {self.first} WITH TABLE {self.q(old)}")
            swapped = time.monotonic()
            self.run(f"INSERT INTO {self.q(t)} ({columns}) SELECT {columns} FROM {self.q(old)}")
            self.run(f"DROP TABLE {self.q(old)}")
        say(
            f"swapped: rename + exchange took {swapped - started:.2f}s (writers waited at most that long); "
            f"rows written meanwhile copied back in {time.monotonic() - swapped:.2f}s"
        )

    def finish_interrupted(self, say: Callable[[str], None]) -> None:
        # DDL is not transactional here: a conversion stopped between its RENAME and the end
        # leaves the old table beside the partitioned one. Its rows (all of them before the
        # exchange, the few written meanwhile after it) move in; those already in are skipped.
        old = f"{self.table}_unpartitioned"
        if old not in self.connection.introspection.table_names():
            return
        columns = self.column_list()
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"INSERT IGNORE INTO {self.q(self.table)} ({columns}) SELECT {columns} FROM {self.q(old)}"
            )
            moved = cursor.rowcount
        self.run(f"DROP TABLE {self.q(old)}")
        say(f"finished an interrupted conversion: {moved} row(s) moved in from {old}")

    def add(self, dated: list[tuple[datetime, datetime]]) -> list[str]:
        if not dated:
            return []
        current = self.partitions() or []
        parts = ", ".join(self.definitions(dated))
        if current and current[-1].catch_all:
            sql = (
                f"ALTER TABLE {self.q(self.table)} REORGANIZE PARTITION {current[-1].name} INTO "
                f"({parts}, PARTITION {current[-1].name} VALUES LESS THAN (MAXVALUE))"
            )
        else:
            sql = f"ALTER TABLE {self.q(self.table)} ADD PARTITION ({parts})"
        self.ddl(sql)
        return [partition_suffix(lo) for lo, _ in dated]

    def drop(self, names: list[str]) -> None:
        if names:
            self.ddl(f"ALTER TABLE {self.q(self.table)} DROP PARTITION {', '.join(self.q(n) for n in names)}")

    def ddl(self, sql: str) -> None:
        """A partition DDL with a short metadata-lock wait, retried: a long reader of the table
        makes it wait, and everything after it would wait too (MySQL's default is a day)."""
        for attempt in range(DDL_TRIES):
            try:
                with self.lock_wait(DDL_LOCK_WAIT):
                    self.run(sql)
                return
            except OperationalError as exc:
                if attempt == DDL_TRIES - 1 or exc.args[:1] != (1205,):
                    raise
                logger.info("history partitions: %s waited too long for its lock; retrying", sql[:60])
                time.sleep(1 + attempt)

    def lock_wait(self, seconds: int) -> _LockWait:
        return _LockWait(self, seconds)


class _LockWait:
    """``lock_wait_timeout`` lowered for the session while a DDL runs, then put back."""

    def __init__(self, owner: MySQLPartitioning, seconds: int) -> None:
        self.owner, self.seconds, self.before = owner, seconds, None

    def __enter__(self) -> None:
        row = self.owner.one("SELECT @@SESSION.lock_wait_timeout")
        self.before = None if row is None else row[0]
        self.owner.run("SET SESSION lock_wait_timeout = %s", [self.seconds])

    def __exit__(self, *exc: object) -> None:
        if self.before is not None:
            self.owner.run("SET SESSION lock_wait_timeout = %s", [self.before])
