"""Time partitions of the attempt history: what every database shares, and the answer of those
that have no partitioning (SQLite, unknown vendors).

The history table is partitioned by range of ``finished_at``: one partition per day or month,
a first partition holding everything older (the rows of a converted table), and a catch-all
above the last range (MAXVALUE on MySQL/MariaDB, DEFAULT on PostgreSQL) so that an insert never
fails for want of a partition. Both databases require the partition column in every unique
key, so the table's primary key is ``(id, finished_at)``; Django's model keeps ``id`` as its
pk, unique by construction (one sequence / AUTO_INCREMENT for the whole table).

Partition bounds are DDL: no database takes them as parameters, so they are written as literals
formatted here from ``datetime`` values (never from text given by a user).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from django.db import connections, models

from django_dbqueue.compat import UTC

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper

#: Room left between the first partition's bound and "now" when a live table is converted:
#: rows that writers add while the conversion runs must still fall below it.
CONVERT_MARGIN_SECONDS = 3600


class PartitioningUnsupported(Exception):
    """This database (or this table's existing layout) cannot be partitioned by the app."""


@dataclass(frozen=True)
class Partition:
    name: str
    #: Inclusive lower bound; None: unbounded below (the first partition).
    lower: datetime | None
    #: Exclusive upper bound; None: the catch-all partition.
    upper: datetime | None
    #: The database's row estimate (statistics, not a count), None if unknown.
    rows: int | None = None

    @property
    def catch_all(self) -> bool:
        return self.upper is None


def literal(moment: datetime) -> str:
    """A bound as SQL text: UTC, to the second (bounds are whole days or months)."""
    return "'" + moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") + "'"


def partition_suffix(lower: datetime) -> str:
    """``p20261125`` for a partition starting at that day's midnight (UTC)."""
    moment = lower.astimezone(UTC)
    return "p" + moment.strftime("%Y%m%d" if moment.time() == datetime.min.time() else "%Y%m%d%H%M")


def parse_bound(text: str) -> datetime | None:
    """A bound read back from the catalog (``'2026-11-25 00:00:00'``), None for MIN/MAXVALUE."""
    text = text.strip().strip("'")
    if text.upper() in ("MINVALUE", "MAXVALUE"):
        return None
    # PostgreSQL's catalog gives the offset as "+00"; Python 3.10's fromisoformat() wants
    # "+00:00" (3.11 takes both).
    if re.search(r"[+-]\d\d\Z", text):
        text += ":00"
    moment = datetime.fromisoformat(text)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


class HistoryPartitioning:
    """Partition upkeep of one history table on one database. This base class is the answer of
    databases without partitioning: every operation raises :class:`PartitioningUnsupported`,
    and ``purgequeue`` deletes old history in batches as before."""

    supported = False
    reason = "this database has no table partitioning: purgequeue deletes old history in batches"

    def __init__(self, alias: str, model: type[models.Model]) -> None:
        self.alias = alias
        self.table = model._meta.db_table
        self.id_column = cast(str, model._meta.pk.column)
        self.time_column = cast(str, cast(models.Field, model._meta.get_field("finished_at")).column)
        self.columns = [cast(str, field.column) for field in model._meta.concrete_fields]

    @property
    def connection(self) -> BaseDatabaseWrapper:
        return connections[self.alias]

    def q(self, name: str) -> str:
        return self.connection.ops.quote_name(name)

    def run(self, sql: str, params: list[Any] | None = None) -> None:
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)

    def one(self, sql: str, params: list[Any] | None = None) -> tuple | None:
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchone()

    def value(self, moment: datetime) -> object:
        """A time as a statement parameter (naive UTC text on MySQL, as Django stores it)."""
        return self.connection.ops.adapt_datetimefield_value(moment)

    def column_list(self) -> str:
        return ", ".join(self.q(column) for column in self.columns)

    def max_of(self, column: str, table: str | None = None) -> object:
        row = self.one(f"SELECT MAX({self.q(column)}) FROM {self.q(table or self.table)}")
        return None if row is None else row[0]

    # -- what each database answers --------------------------------------------------------

    def unsupported(self) -> PartitioningUnsupported:
        return PartitioningUnsupported(f"{self.connection.vendor}: {self.reason}")

    def now(self) -> datetime:
        """The database clock, in UTC."""
        raise self.unsupported()

    def partitions(self) -> list[Partition] | None:
        """The table's partitions, oldest first, the catch-all last; None: not partitioned."""
        return None

    def convert(
        self, bound: datetime, dated: list[tuple[datetime, datetime]], say: Callable[[str], None]
    ) -> None:
        """Turn the unpartitioned table into a partitioned one: its rows become the first
        partition (everything below ``bound``), ``dated`` partitions follow, then the catch-all."""
        raise self.unsupported()

    def finish_interrupted(self, say: Callable[[str], None]) -> None:
        """Complete a conversion stopped after its swap (nothing where the swap is one
        transaction, as on PostgreSQL)."""

    def add(self, dated: list[tuple[datetime, datetime]]) -> list[str]:
        """Create these partitions above the last one (rows the catch-all holds for their
        ranges move into them); return their names."""
        raise self.unsupported()

    def drop(self, names: list[str]) -> None:
        """Drop these partitions, rows and all (one cheap DDL, no per-row work)."""
        raise self.unsupported()
