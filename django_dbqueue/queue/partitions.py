"""The attempt history partitioned by time (opt-in): conversion, partitions made ahead, and
rotation — dropping a whole partition is the cheap purge.

``DBQUEUE_HISTORY_PARTITIONS = "daily"`` (or ``"monthly"``) says how long each partition spans;
``manage.py partitionhistory --convert`` turns an existing table into a partitioned one; workers'
tickers (hourly), ``purgequeue`` and ``partitionhistory --maintain`` keep
``DBQUEUE_HISTORY_PARTITIONS_AHEAD`` partitions made ahead of the database clock;
``purgequeue --attempts-older-than`` drops the partitions wholly older than its cutoff and deletes
only the rest in batches. The vendor SQL is in ``backends/`` (``history_partitioning``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from django.db import router

from ..backends import backend_for, read_now
from ..backends.partitioning import (
    CONVERT_MARGIN_SECONDS,
    HistoryPartitioning,
    Partition,
    PartitioningUnsupported,
)
from ..compat import UTC
from ..conf import settings
from .history import attempt_model

__all__ = ["GRANULARITIES", "Partition", "PartitioningUnsupported", "convert", "make_ahead", "rotate"]

logger = logging.getLogger("django_dbqueue.history")

GRANULARITIES = ("daily", "monthly")


def history_database(database: str | None = None) -> str:
    return database or router.db_for_write(attempt_model()) or "default"


def partitioning(database: str | None = None) -> HistoryPartitioning:
    using = history_database(database)
    return backend_for(using).history_partitioning(attempt_model())


def granularity(chosen: str | None = None) -> str:
    return chosen or settings.HISTORY_PARTITIONS or "daily"


def period_start(moment: datetime, span: str) -> datetime:
    moment = moment.astimezone(UTC)
    day = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    return day.replace(day=1) if span == "monthly" else day


def next_boundary(moment: datetime, span: str) -> datetime:
    """The first period start strictly after ``moment``."""
    start = period_start(moment, span)
    if span == "monthly":
        return (start + timedelta(days=32)).replace(day=1)
    return start + timedelta(days=1)


def periods(first: datetime, until: datetime, span: str) -> list[tuple[datetime, datetime]]:
    """Contiguous ranges from ``first`` (a bound already in place) until one ends after ``until``."""
    found, lower = [], first
    while lower <= until:
        upper = next_boundary(lower, span)
        found.append((lower, upper))
        lower = upper
    return found


def horizon(now: datetime, span: str, ahead: int) -> datetime:
    """The start of the last period that must exist: ``ahead`` periods after the current one."""
    moment = period_start(now, span)
    for _ in range(ahead):
        moment = next_boundary(moment, span)
    return moment


def convert(
    database: str | None,
    span: str,
    ahead: int,
    start: datetime | None,
    say: Callable[[str], None],
    dry_run: bool = False,
) -> bool:
    """Partition the unpartitioned history table; False if it already was (nothing done)."""
    part = partitioning(database)
    if part.partitions() is not None:
        if not dry_run:
            part.finish_interrupted(say)
        return False
    now = part.now()
    if start is None:
        newest = part.max_of(part.time_column)
        latest = now + timedelta(seconds=CONVERT_MARGIN_SECONDS)
        if isinstance(newest, datetime):
            latest = max(latest, newest if newest.tzinfo else newest.replace(tzinfo=UTC))
        bound = next_boundary(latest, span)
    else:
        if start > now:
            raise PartitioningUnsupported(
                f"--start {start:%Y-%m-%d} is in the future: give a date up to today"
            )
        bound = start
    dated = periods(bound, horizon(now, span, ahead), span)
    say(
        f"{part.table}: rows before {bound:%Y-%m-%d %H:%M} UTC become the first partition; "
        f"{len(dated)} {span} partition(s) from there to {dated[-1][1] if dated else bound:%Y-%m-%d}; "
        "a catch-all above"
    )
    if not dry_run:
        part.convert(bound, dated, say)
    return True


def make_ahead(database: str | None = None, span: str | None = None, ahead: int | None = None) -> list[str]:
    """Create the partitions missing up to ``ahead`` periods after now; return their names.
    Nothing (and no error) on an unpartitioned table."""
    part = partitioning(database)
    found = part.partitions()
    if found is None:
        if settings.HISTORY_PARTITIONS is not None and part.supported:
            logger.warning(
                "DBQUEUE_HISTORY_PARTITIONS is set but %s is not partitioned: "
                "run manage.py partitionhistory --convert",
                part.table,
            )
        return []
    span = granularity(span)
    ahead = settings.HISTORY_PARTITIONS_AHEAD if ahead is None else ahead
    ranged = [p for p in found if not p.catch_all and p.upper is not None]
    if not ranged:
        return []
    last = max(p.upper for p in ranged if p.upper is not None)
    return part.add(periods(last, horizon(part.now(), span, ahead), span))


def rotate(database: str | None, cutoff: datetime, dry_run: bool = False) -> list[Partition]:
    """Drop the partitions whose every row is older than ``cutoff`` (upper bound at or below
    it), never the catch-all; return them. Nothing on an unpartitioned table or on databases
    without partitioning."""
    part = partitioning(database)
    if not part.supported:
        return []
    found = part.partitions()
    if found is None:
        return []
    old = [p for p in found if p.upper is not None and p.upper <= cutoff]
    if old and not dry_run:
        part.drop([p.name for p in old])
    return old


def db_now(database: str | None = None) -> datetime:
    """The database clock (UTC), read once: a purge's cutoff, the partitions due ahead."""
    part = partitioning(database)
    return part.now() if part.supported else read_now(history_database(database))
