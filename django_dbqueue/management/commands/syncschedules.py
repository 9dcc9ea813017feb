"""``manage.py syncschedules``: copy the code's schedule declarations to the Schedule table.

``runqueue`` does the same when its workers start; this is for a deploy step that wants the
table right before (or without) the workers, and that fails on a declaration it cannot use.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from django_dbqueue.schedules import sync


class Command(BaseCommand):
    help = "Write the schedules declared in code (@schedule, DBQUEUE_SCHEDULES) to the Schedule table."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--database", default=None, help="Database alias (default: the router's choice).")

    def handle(self, *args: Any, **options: Any) -> None:
        database = options["database"]
        if database is not None and database not in connections:
            raise CommandError(f"Unknown database alias {database!r}.")
        result = sync(database)
        for label in ("created", "updated", "disabled"):
            names = getattr(result, label)
            if names:
                self.stdout.write(f"{label}: {', '.join(sorted(names))}")
        if result.problems:
            raise CommandError("schedules not synced:\n" + "\n".join(f"  {p}" for p in result.problems))
        self.stdout.write("schedules in sync with the code")
