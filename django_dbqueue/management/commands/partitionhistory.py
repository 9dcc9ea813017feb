"""``manage.py partitionhistory``: partition the attempt history by time (MySQL/MariaDB,
PostgreSQL), make partitions ahead, and show them. The work is in ``django_dbqueue.queue.partitions``."""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, connections

from django_dbqueue.compat import UTC
from django_dbqueue.conf import Settings, settings
from django_dbqueue.management.arguments import whole_number
from django_dbqueue.queue import partitions


def day(value: str) -> datetime:
    try:
        return datetime.strptime(value, "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a date like 2026-11-01") from None


class Command(BaseCommand):
    help = (
        "Partition the QueueAttempt history by finished_at (--convert), make partitions ahead "
        "(--maintain), or list the partitions (--status, the default)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        action = parser.add_mutually_exclusive_group()
        action.add_argument("--status", action="store_true", help="List the partitions (the default).")
        action.add_argument(
            "--convert",
            action="store_true",
            help="Turn the unpartitioned history table, rows and all, into a partitioned one.",
        )
        action.add_argument(
            "--maintain", action="store_true", help="Make the partitions missing up to --ahead periods ahead."
        )
        parser.add_argument(
            "--granularity",
            choices=partitions.GRANULARITIES,
            default=None,
            help="Span of each partition (default: DBQUEUE_HISTORY_PARTITIONS, else daily).",
        )
        low, high = (
            int(Settings.HISTORY_PARTITIONS_AHEAD.low or 1),
            int(Settings.HISTORY_PARTITIONS_AHEAD.high or 1),
        )
        parser.add_argument(
            "--ahead",
            type=whole_number(low, high),
            default=None,
            help="Partitions made ahead of the current one (default: DBQUEUE_HISTORY_PARTITIONS_AHEAD).",
        )
        parser.add_argument(
            "--start",
            type=day,
            default=None,
            help="With --convert: dated partitions begin at this UTC date (YYYY-MM-DD, not in the future); "
            "rows already there move under the table lock, so use it on empty or small tables.",
        )
        parser.add_argument("--dry-run", action="store_true", help="Say what --convert would do, do nothing.")
        parser.add_argument("--database", default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        database = options["database"]
        if database and database not in connections:
            raise CommandError(f"Unknown database alias {database!r}.")
        if options["start"] and not options["convert"]:
            raise CommandError("--start only goes with --convert.")
        span = partitions.granularity(options["granularity"])
        ahead = options["ahead"]
        try:
            if options["convert"]:
                ahead = settings.HISTORY_PARTITIONS_AHEAD if ahead is None else ahead
                done = partitions.convert(
                    database, span, ahead, options["start"], self.stdout.write, dry_run=options["dry_run"]
                )
                if not done:
                    self.stdout.write("The history table is partitioned already: nothing to convert.")
                    made = [] if options["dry_run"] else partitions.make_ahead(database, span, ahead)
                    if made:
                        self.stdout.write(f"Made {len(made)} partition(s) ahead: {', '.join(made)}")
                elif not options["dry_run"]:
                    self.stdout.write(self.style.SUCCESS("Converted: the history table is partitioned."))
                return
            if options["maintain"]:
                made = partitions.make_ahead(database, span, ahead)
                self.stdout.write(
                    f"Made {len(made)} partition(s) ahead" + (f": {', '.join(made)}" if made else ".")
                )
            self.status(database)
        except partitions.PartitioningUnsupported as exc:
            raise CommandError(str(exc)) from None
        except DatabaseError as exc:
            raise CommandError(f"The database refused it: {exc}") from exc

    def status(self, database: str | None) -> None:
        part = partitions.partitioning(database)
        if not part.supported:
            self.stdout.write(f"{part.table}: not partitioned ({part.unsupported()}).")
            return
        found = part.partitions()
        if found is None:
            self.stdout.write(f"{part.table}: not partitioned (manage.py partitionhistory --convert).")
            return
        self.stdout.write(f"{part.table}: {len(found)} partition(s)")
        for p in found:
            lower = "MINVALUE" if p.lower is None else f"{p.lower:%Y-%m-%d %H:%M}"
            upper = f"{p.upper:%Y-%m-%d %H:%M}" if p.upper is not None else "MAXVALUE"
            if p.catch_all:  # rows of no range: past the last one (or anywhere, on PostgreSQL)
                lower, upper = "catch-all", ""
            rows = "?" if p.rows is None else f"~{p.rows:,}"
            self.stdout.write(f"  {p.name:<40} {lower:>16} .. {upper:<16} {rows} rows")
